"""Who is in a multi-gateway deployment (PostgreSQL only; docs/gateways.md): gateway
rows and presence locks, clock offsets to the database clock, the one live session of
each node key, and the deployment's ``NOTIFY`` channel."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy import delete, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import make_url

from netcheck.errors import ConfigError
from netcheck.storage.cluster_tables import (
    Deployment,
    cluster_metadata,
    gateway_sessions,
    gateways,
    key31,
)
from netcheck.storage.store import Store


class Presence:
    """Gateway presence: the tables created, gateway rows, clock offsets, each node's
    one live session, and the deployment's ``NOTIFY`` channel; on top of an open
    PostgreSQL :class:`Store`. :class:`~netcheck.storage.cluster.ClusterStore` adds the
    cluster rounds.

    Raises:
        ConfigError: the store is not PostgreSQL.
        StorageError: the tables cannot be created.
    """

    def __init__(self, store: Store) -> None:
        if store.backend != "postgresql":
            raise ConfigError(
                f"gateways need a PostgreSQL database (database = 'postgresql+psycopg://...'), "
                f"got {store.backend}"
            )
        self.store = store
        with store._write("create gateway tables") as conn:
            store._lock_schema(conn)  # gateways started together: one creates them
            cluster_metadata.create_all(conn)
            db, schema = conn.execute(text("SELECT current_database(), current_schema()")).one()
        url = make_url(store.url).set(drivername="postgresql")
        ns = key31("netcheck", str(db), str(schema))
        self.deployment = Deployment(
            namespace=ns,
            channel=f"netcheck_{ns:08x}",
            conninfo=url.render_as_string(hide_password=False),
        )

    # ------------------------------------------------------------- notify

    def _notify(self, conn: Any, event: Mapping[str, Any]) -> None:
        conn.execute(
            text("SELECT pg_notify(:ch, :payload)"),
            {"ch": self.deployment.channel, "payload": json.dumps(dict(event))},
        )

    def notify(self, event: Mapping[str, Any]) -> None:
        """Publish ``event`` (a small JSON object) on the deployment channel."""
        with self.store._write("notify") as conn:
            self._notify(conn, event)

    # ------------------------------------------------------------ gateways

    def register_gateway(self, gateway_id: str, url: str) -> None:
        """Upsert this gateway's row and drop session rows a previous run left."""
        values = {
            "url": url,
            "lock_id": self.deployment.gateway_lock(gateway_id),
            "started_at": time.time(),
        }
        with self.store._write("register gateway") as conn:
            stmt = pg_insert(gateways).values(gateway_id=gateway_id, **values)
            conn.execute(stmt.on_conflict_do_update(index_elements=["gateway_id"], set_=values))
            conn.execute(
                delete(gateway_sessions).where(gateway_sessions.c.gateway_id == gateway_id)
            )

    def record_clock(self, gateway_id: str, offset_s: float, uncertainty_s: float) -> None:
        """Store a gateway's latest clock offset to the database (seconds)."""
        with self.store._write("record clock offset") as conn:
            conn.execute(
                update(gateways)
                .where(gateways.c.gateway_id == gateway_id)
                .values(offset_s=offset_s, uncertainty_s=uncertainty_s, measured_at=time.time())
            )

    def live_gateways(self) -> list[str]:
        """Ids of gateways whose presence lock is held right now (sorted)."""
        query = text(
            "SELECT g.gateway_id FROM gateways g JOIN pg_locks l ON l.locktype = 'advisory' "
            "AND l.granted AND l.objsubid = 2 AND l.classid::bigint = :ns "
            "AND l.objid::bigint = g.lock_id AND l.database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database()) "
            "ORDER BY g.gateway_id"
        )
        with self.store._read("list live gateways") as conn:
            return [r[0] for r in conn.execute(query, {"ns": self.deployment.namespace})]

    def gateway_rows(self) -> list[dict[str, Any]]:
        """Every registered gateway with ``live`` (presence lock held) added."""
        live = set(self.live_gateways())
        with self.store._read("list gateways") as conn:
            rows = [dict(r._mapping) for r in conn.execute(select(gateways))]
        return [{**r, "live": r["gateway_id"] in live} for r in rows]

    def clock_samples(self, wall_ns: Callable[[], int], n: int = 5) -> list[tuple[int, int, int]]:
        """``n`` samples ``(before_ns, database_ns, after_ns)``: the gateway wall clock
        around ``SELECT clock_timestamp()`` (all Unix ns), on one connection."""
        out = []
        with self.store._read("measure clock offset") as conn:
            conn.execute(text("SELECT 1"))  # connection warm before the first sample
            for _ in range(n):
                t0 = wall_ns()
                db = conn.execute(
                    text("SELECT (extract(epoch from clock_timestamp()) * 1e6)::bigint")
                ).scalar_one()
                t1 = wall_ns()
                out.append((t0, int(db) * 1000, t1))
        return out

    def db_now_ns(self) -> int:
        """The database clock now (Unix ns, µs resolution)."""
        with self.store._read("read database clock") as conn:
            v = conn.execute(
                text("SELECT (extract(epoch from clock_timestamp()) * 1e6)::bigint")
            ).scalar_one()
        return int(v) * 1000

    # ------------------------------------------------------------ sessions

    def claim_session(
        self,
        gateway_id: str,
        node_key: str,
        session_id: str,
        profile: str,
        fingerprint_id: str,
        peer: str,
    ) -> tuple[str, str] | None:
        """Make this the node's one live session; returns the previous owner
        ``(gateway_id, session_id)`` (None if none). Notifies ``superseded`` in the same
        transaction so the previous holder closes its session."""
        values = {
            "gateway_id": gateway_id,
            "session_id": session_id,
            "profile": profile,
            "fingerprint_id": fingerprint_id,
            "peer": peer,
            "connected_at": time.time(),
        }
        t = gateway_sessions
        with self.store._write("claim session") as conn:
            prev = conn.execute(
                select(t.c.gateway_id, t.c.session_id)
                .where(t.c.node_key == node_key)
                .with_for_update()
            ).first()
            stmt = pg_insert(t).values(node_key=node_key, **values)
            conn.execute(stmt.on_conflict_do_update(index_elements=["node_key"], set_=values))
            if prev is not None and tuple(prev) != (gateway_id, session_id):
                self._notify(
                    conn,
                    {"e": "superseded", "node": node_key, "gw": gateway_id, "sid": session_id},
                )
        return None if prev is None else (prev[0], prev[1])

    def drop_session(self, gateway_id: str, node_key: str, session_id: str) -> None:
        """Delete the node's session row if it is still this gateway's session."""
        t = gateway_sessions
        with self.store._write("drop session") as conn:
            conn.execute(
                delete(t).where(
                    t.c.node_key == node_key,
                    t.c.gateway_id == gateway_id,
                    t.c.session_id == session_id,
                )
            )

    def session_owners(self, node_keys: Iterable[str]) -> dict[str, tuple[str, str]]:
        """``node_key -> (gateway_id, session_id)`` of the rows that exist."""
        keys = list(node_keys)
        t = gateway_sessions
        out: dict[str, tuple[str, str]] = {}
        with self.store._read("read session owners") as conn:
            for i in range(0, len(keys), 500):
                q = select(t.c.node_key, t.c.gateway_id, t.c.session_id).where(
                    t.c.node_key.in_(keys[i : i + 500])
                )
                out.update({r[0]: (r[1], r[2]) for r in conn.execute(q)})
        return out

    def connected_nodes(self) -> list[dict[str, Any]]:
        """Session rows of live gateways: which gateway holds each node."""
        live = self.live_gateways()
        t = gateway_sessions
        with self.store._read("list gateway sessions") as conn:
            q = select(t).where(t.c.gateway_id.in_(live)).order_by(t.c.node_key)
            return [dict(r._mapping) for r in conn.execute(q)]
