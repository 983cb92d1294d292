"""The :class:`Store`: every read and write of netcheck's own tables (nodes, references,
rounds, results, verdicts), one transaction per method, over the connection rules of
:class:`~netcheck.storage.database.Database`. Its parts: :mod:`~netcheck.storage.reference_store`
(the canary pool) and :mod:`~netcheck.storage.round_store` (rounds, results, verdicts);
node rows are here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from netcheck.storage.reference_store import ReferenceStore
from netcheck.storage.round_store import RoundStore
from netcheck.storage.tables import nodes


class Store(ReferenceStore, RoundStore):
    """Database access for nodes, references, rounds, results and verdicts, opened as
    :class:`~netcheck.storage.database.Database` (its arguments and errors)."""

    def upsert_node(
        self,
        node_key: str,
        name: str,
        profile: str,
        fingerprint_id: str,
        fingerprint: Mapping[str, str | int],
        seen_at: float,
    ) -> None:
        """Insert a node or update its name, profile, fingerprint and ``last_seen_at``."""
        values = {
            "name": name,
            "profile": profile,
            "fingerprint_id": fingerprint_id,
            "fingerprint": dict(fingerprint),
            "last_seen_at": seen_at,
        }
        with self._write("upsert node") as conn:
            if conn.dialect.name in ("sqlite", "postgresql"):  # one atomic statement
                dialect_insert = sqlite_insert if conn.dialect.name == "sqlite" else pg_insert
                stmt = dialect_insert(nodes).values(
                    node_key=node_key, first_seen_at=seen_at, **values
                )
                conn.execute(stmt.on_conflict_do_update(index_elements=["node_key"], set_=values))
                return
            found = conn.execute(
                update(nodes).where(nodes.c.node_key == node_key).values(**values)
            ).rowcount
            if not found:
                conn.execute(
                    insert(nodes).values(node_key=node_key, first_seen_at=seen_at, **values)
                )

    def touch_node(self, node_key: str, seen_at: float) -> None:
        """Set a known node's ``last_seen_at`` (when its session ends); unknown keys are
        ignored."""
        with self._write("update node last seen") as conn:
            conn.execute(
                update(nodes).where(nodes.c.node_key == node_key).values(last_seen_at=seen_at)
            )

    def list_nodes(self) -> list[dict[str, Any]]:
        """All nodes ever seen, most recently seen first (one dict per row)."""
        with self._read("list nodes") as conn:
            rows = conn.execute(select(nodes).order_by(nodes.c.last_seen_at.desc()))
            return [dict(r._mapping) for r in rows]
