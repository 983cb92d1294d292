"""The tables of a multi-gateway deployment (PostgreSQL only; docs/gateways.md):
``gateways``, ``gateway_sessions``, ``cluster_rounds``, ``round_gateways``,
``round_members``, and :class:`Deployment`, the names of the deployment's advisory
locks and ``NOTIFY`` channel (derived from the database and schema, so deployments or
tests sharing one server never collide)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

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
)

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


def key31(*parts: str) -> int:
    """A 31-bit advisory-lock key from ``parts`` (SHA-256, first 4 bytes)."""
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
        return key31("gateway", gateway_id) or 1
