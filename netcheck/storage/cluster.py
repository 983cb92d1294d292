"""Shared state of a multi-gateway deployment (PostgreSQL only; docs/gateways.md):
:class:`ClusterStore`, the gateway presence of :mod:`~netcheck.storage.presence` plus
the cluster rounds (their states, the gateways and members in each, and the round data
a gateway reads). Tables: :mod:`~netcheck.storage.cluster_tables`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from netcheck.storage.cluster_tables import cluster_rounds, round_gateways, round_members
from netcheck.storage.database import json_ready
from netcheck.storage.presence import Presence
from netcheck.storage.tables import reference_prompts, results, rounds


class ClusterStore(Presence):
    """SQL of the gateway tables, on top of an open PostgreSQL :class:`Store`.

    Raises:
        ConfigError: the store is not PostgreSQL.
        StorageError: the tables cannot be created.
    """

    # -------------------------------------------------------------- rounds

    def create_round(
        self, round_id: str, leader_id: str, profile: str, offset_s: float, uncertainty_s: float
    ) -> None:
        """Insert a round in state ``preparing`` and notify ``prepare``."""
        with self.store._write(f"create cluster round {round_id}") as conn:
            conn.execute(
                cluster_rounds.insert().values(
                    round_id=round_id,
                    leader_id=leader_id,
                    profile=profile,
                    state="preparing",
                    leader_offset_s=offset_s,
                    leader_uncertainty_s=uncertainty_s,
                    created_at=time.time(),
                )
            )
            self._notify(conn, {"e": "prepare", "round": round_id})

    def set_round_state(
        self,
        round_id: str,
        state: str,
        *,
        expect: Sequence[str] = (),
        release_at_ns: int | None = None,
        reason: str | None = None,
    ) -> bool:
        """Move a round to ``state`` (only from one of ``expect`` when given) and notify
        it; returns False if the round was not in an expected state."""
        values: dict[str, Any] = {"state": state}
        if release_at_ns is not None:
            values["release_at_ns"] = release_at_ns
        if reason is not None:
            values["reason"] = reason
        c = cluster_rounds.c
        with self.store._write(f"set round {round_id} {state}") as conn:
            q = update(cluster_rounds).where(c.round_id == round_id)
            if expect:
                q = q.where(c.state.in_(list(expect)))
            if conn.execute(q.values(**values)).rowcount != 1:
                return False
            self._notify(conn, {"e": state, "round": round_id})
        return True

    def abort_round(self, round_id: str, reason: str, summary: Mapping[str, Any]) -> bool:
        """Abort an open round in one transaction: ``cluster_rounds`` state ``aborted``
        with ``reason``, and the netcheck ``rounds`` row (if planned and unfinished)
        status ``aborted`` with ``summary``; notifies ``aborted``. Returns False if the
        round was already closed or aborted."""
        c = cluster_rounds.c
        with self.store._write(f"abort round {round_id}") as conn:
            n = conn.execute(
                update(cluster_rounds)
                .where(c.round_id == round_id, c.state.not_in(["closed", "aborted"]))
                .values(state="aborted", reason=reason)
            ).rowcount
            if n != 1:
                return False
            conn.execute(
                update(rounds)
                .where(rounds.c.round_id == round_id, rounds.c.finished_at.is_(None))
                .values(status="aborted", summary=dict(summary), finished_at=time.time())
            )
            self._notify(conn, {"e": "aborted", "round": round_id})
        return True

    def close_round(self, round_id: str, summary: Mapping[str, Any]) -> bool:
        """Close a released round in one transaction: ``cluster_rounds`` state
        ``closed`` and the netcheck ``rounds`` row ``complete`` with ``summary``;
        notifies ``closed``. Returns False (and changes nothing) if the round is no
        longer ``released`` (e.g. a new leader aborted it)."""
        c = cluster_rounds.c
        with self.store._write(f"close round {round_id}") as conn:
            n = conn.execute(
                update(cluster_rounds)
                .where(c.round_id == round_id, c.state == "released")
                .values(state="closed")
            ).rowcount
            if n != 1:
                return False
            conn.execute(
                update(rounds)
                .where(rounds.c.round_id == round_id)
                .values(status="complete", summary=json_ready(summary), finished_at=time.time())
            )
            self._notify(conn, {"e": "closed", "round": round_id})
        return True

    def get_round(self, round_id: str) -> dict[str, Any] | None:
        """The ``cluster_rounds`` row of a round, or None."""
        with self.store._read("read cluster round") as conn:
            row = conn.execute(
                select(cluster_rounds).where(cluster_rounds.c.round_id == round_id)
            ).first()
        return None if row is None else dict(row._mapping)

    def open_rounds(self) -> list[dict[str, Any]]:
        """Rounds not yet ``closed`` or ``aborted``, oldest first."""
        c = cluster_rounds.c
        q = select(cluster_rounds).where(c.state.not_in(["closed", "aborted"]))
        with self.store._read("list open cluster rounds") as conn:
            return [dict(r._mapping) for r in conn.execute(q.order_by(c.created_at))]

    def join_round(
        self,
        round_id: str,
        gateway_id: str,
        members: Sequence[Mapping[str, Any]],
        gateway_values: Mapping[str, Any],
    ) -> set[str]:
        """Insert this gateway's ``round_members`` (node_key, session_id, fingerprint_id,
        rtt_s) and its ``round_gateways`` row in one transaction; returns the node keys
        that are now members through this gateway (a key another gateway already
        entered stays theirs). Notifies ``joined``."""
        landed: set[str] = set()
        with self.store._write(f"join round {round_id}") as conn:
            for i in range(0, len(members), 500):
                rows = [
                    {"round_id": round_id, "gateway_id": gateway_id, **m}
                    for m in members[i : i + 500]
                ]
                stmt = pg_insert(round_members).values(rows).on_conflict_do_nothing()
                landed.update(conn.execute(stmt.returning(round_members.c.node_key)).scalars())
            conn.execute(
                round_gateways.insert().values(
                    round_id=round_id, gateway_id=gateway_id, members=len(landed),
                    **gateway_values,
                )
            )  # fmt: skip
            self._notify(conn, {"e": "joined", "round": round_id, "gw": gateway_id})
        return landed

    def update_round_gateway(
        self, round_id: str, gateway_id: str, event: str, **values: Any
    ) -> None:
        """Update this gateway's ``round_gateways`` row and notify ``event``."""
        rg = round_gateways.c
        with self.store._write(f"update round {round_id} gateway") as conn:
            conn.execute(
                update(round_gateways)
                .where(rg.round_id == round_id, rg.gateway_id == gateway_id)
                .values(**values)
            )
            self._notify(conn, {"e": event, "round": round_id, "gw": gateway_id})

    def round_gateway_rows(self, round_id: str) -> list[dict[str, Any]]:
        """``round_gateways`` rows of one round, by gateway id."""
        rg = round_gateways.c
        q = select(round_gateways).where(rg.round_id == round_id).order_by(rg.gateway_id)
        with self.store._read("read round gateways") as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def round_member_rows(
        self, round_id: str, gateway_id: str | None = None
    ) -> list[dict[str, Any]]:
        """``round_members`` rows of one round (of one gateway when given), by node key."""
        m = round_members.c
        q = select(round_members).where(m.round_id == round_id)
        if gateway_id is not None:
            q = q.where(m.gateway_id == gateway_id)
        with self.store._read("read round members") as conn:
            return [dict(r._mapping) for r in conn.execute(q.order_by(m.node_key))]

    def round_gateway_of(self, round_id: str) -> dict[str, str]:
        """``node_key -> gateway_id`` for one round."""
        return {r["node_key"]: r["gateway_id"] for r in self.round_member_rows(round_id)}

    # ------------------------------------------------- round data for gateways

    def round_row(self, round_id: str) -> dict[str, Any] | None:
        """The netcheck ``rounds`` row (batch size, max_new_tokens, status), or None."""
        with self.store._read("read round") as conn:
            row = conn.execute(select(rounds).where(rounds.c.round_id == round_id)).first()
        return None if row is None else dict(row._mapping)

    def canary_answers(self, ref_ids: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """``ref_id -> answer`` (token ids) of the given references."""
        ids = list(ref_ids)
        t = reference_prompts
        out: dict[str, tuple[int, ...]] = {}
        with self.store._read("read canary answers") as conn:
            for i in range(0, len(ids), 500):
                q = select(t.c.ref_id, t.c.answer).where(t.c.ref_id.in_(ids[i : i + 500]))
                out.update({r[0]: tuple(r[1]) for r in conn.execute(q)})
        return out

    def round_results(self, round_id: str) -> dict[str, dict[str, Any]]:
        """``node_key -> results row`` of one round (outputs, receipt fields, stamps)."""
        q = select(results).where(results.c.round_id == round_id)
        with self.store._read("read round results") as conn:
            return {r._mapping["node_key"]: dict(r._mapping) for r in conn.execute(q)}


__all__ = ["ClusterStore"]
