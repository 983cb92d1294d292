"""Shared state of a multi-gateway deployment (PostgreSQL only; docs/gateways.md).

Tables: ``gateways``, ``gateway_sessions``, ``cluster_rounds``, ``round_gateways``,
``round_members``, created on first use next to the :class:`~netcheck.storage.Store`
tables. Advisory-lock keys and the ``NOTIFY`` channel are derived from the database and
schema (:class:`Deployment`), so deployments or tests sharing one server never collide.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Float,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    delete,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import make_url

from netcheck.errors import ConfigError
from netcheck.storage.database import json_ready
from netcheck.storage.store import Store
from netcheck.storage.tables import reference_prompts, results, rounds

cluster_metadata = MetaData()

gateways = Table(
    "gateways",
    cluster_metadata,
    Column("gateway_id", String(200), primary_key=True),
    Column("url", Text, nullable=False, default=""),
    Column("lock_id", BigInteger, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("offset_s", Float, nullable=True),  # database clock minus gateway wall clock
    Column("uncertainty_s", Float, nullable=True),
    Column("measured_at", Float, nullable=True),
)

gateway_sessions = Table(
    "gateway_sessions",
    cluster_metadata,
    Column("node_key", String(64), primary_key=True),  # one live session per node key
    Column("gateway_id", String(200), nullable=False),
    Column("session_id", String(64), nullable=False),  # hex
    Column("profile", String(200), nullable=False),
    Column("fingerprint_id", String(64), nullable=False),
    Column("peer", String(200), nullable=False, default=""),
    Column("connected_at", Float, nullable=False),
)

cluster_rounds = Table(
    "cluster_rounds",
    cluster_metadata,
    Column("round_id", String(200), primary_key=True),
    Column("leader_id", String(200), nullable=False),
    Column("profile", String(200), nullable=False),
    # preparing -> planned -> released -> closed | aborted
    Column("state", String(20), nullable=False),
    Column("leader_offset_s", Float, nullable=False),
    Column("leader_uncertainty_s", Float, nullable=False),
    Column("release_at_ns", BigInteger, nullable=True),  # database clock, Unix ns
    Column("created_at", Float, nullable=False),
    Column("reason", Text, nullable=True),
)

round_gateways = Table(
    "round_gateways",
    cluster_metadata,
    Column("round_id", String(200), nullable=False),
    Column("gateway_id", String(200), nullable=False),
    # joined | excluded -> ready -> reported
    Column("status", String(20), nullable=False),
    Column("reason", Text, nullable=True),
    Column("offset_s", Float, nullable=True),  # to the database clock
    Column("leader_offset_s", Float, nullable=True),  # to the leader
    Column("uncertainty_s", Float, nullable=True),  # of leader_offset_s
    Column("members", Integer, nullable=False, default=0),
    Column("ready", Integer, nullable=False, default=0),
    Column("recorded", Integer, nullable=False, default=0),
    Column("release_first_ns", BigInteger, nullable=True),  # cluster clock
    Column("release_last_ns", BigInteger, nullable=True),
    Column("release_first_wall_ns", BigInteger, nullable=True),  # gateway's own wall clock
    Column("release_last_wall_ns", BigInteger, nullable=True),
    Column("phases", JSON, nullable=True),
    PrimaryKeyConstraint("round_id", "gateway_id"),
)

round_members = Table(
    "round_members",
    cluster_metadata,
    Column("round_id", String(200), nullable=False),
    Column("node_key", String(64), nullable=False),
    Column("gateway_id", String(200), nullable=False),
    Column("session_id", String(64), nullable=False),
    Column("fingerprint_id", String(64), nullable=False),
    Column("rtt_s", Float, nullable=True),
    PrimaryKeyConstraint("round_id", "node_key"),  # a node is in a round on one gateway
)


def _key31(*parts: str) -> int:
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class Deployment:
    """Names a deployment's advisory locks and channel (database + schema).

    Attributes:
        namespace: first key of every advisory lock of the deployment (31-bit).
        channel: the ``LISTEN``/``NOTIFY`` channel.
        conninfo: libpq URL for a plain psycopg connection (same database and options).
    """

    namespace: int
    channel: str
    conninfo: str

    LEADER_LOCK = 0

    def gateway_lock(self, gateway_id: str) -> int:
        """Second key of a gateway's presence lock: 31-bit, never the leader's 0."""
        return _key31("gateway", gateway_id) or 1


class ClusterStore:
    """SQL of the gateway tables, on top of an open PostgreSQL :class:`Store`.

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
            cluster_metadata.create_all(conn)
            db, schema = conn.execute(text("SELECT current_database(), current_schema()")).one()
        url = make_url(store.url).set(drivername="postgresql")
        ns = _key31("netcheck", str(db), str(schema))
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


__all__ = [
    "ClusterStore",
    "Deployment",
    "cluster_metadata",
    "cluster_rounds",
    "gateway_sessions",
    "gateways",
    "round_gateways",
    "round_members",
]
