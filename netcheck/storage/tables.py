"""Table definitions (SQLAlchemy Core) and the reference row type.

Portable SQL only: JSON columns use :class:`sqlalchemy.JSON` (TEXT on SQLite, JSON on
PostgreSQL); byte strings are stored as hex text so rows read the same everywhere.
Times are Unix seconds (``*_at``, float) or monotonic nanoseconds of the coordinator's
clock (``*_ns``, integer). Wall-clock ``*_at`` values are for display only: they can step
back (NTP, a manual fix), so rows are ordered by database-assigned sequences, never by them
(``rounds.seq``, the ``id`` columns).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

RowId = BigInteger().with_variant(Integer(), "sqlite")
"""Type of the surrogate ids (``id``, ``flag_id``) and the foreign keys to them: 64-bit
(BIGSERIAL on PostgreSQL: tables that grow with rounds x nodes pass 2^31 rows in about
149 days at 10,000 nodes and a round a minute); SQLite's ``INTEGER PRIMARY KEY`` is
already 64-bit and is the only spelling that autoincrements there. Databases created
with 32-bit ids are upgraded in place (:mod:`netcheck.storage.migrate`)."""

MAX_ROW_ID = 2**63 - 1
"""The largest value a :data:`RowId` column holds (a larger one is no row: PostgreSQL
refuses it in a query instead of matching nothing)."""


@dataclass(frozen=True)
class ReferenceRow:
    """One stored reference: a prompt and its answer computed on trusted hardware.

    ``answer`` holds exactly the profile's ``max_new_tokens`` token ids; ``created_at`` is
    Unix seconds; ``spent_round`` is the round that used it as a canary (``None`` = unspent).
    """

    ref_id: str
    profile: str
    fingerprint_id: str
    prompt: str
    answer: tuple[int, ...]
    created_at: float
    spent_round: str | None = None


nodes = Table(
    "nodes",
    metadata,
    Column("node_key", String(64), primary_key=True),  # "ed25519:<base64url>"
    Column("name", String(200), nullable=False, default=""),
    Column("profile", String(200), nullable=False),
    Column("fingerprint_id", String(64), nullable=False),
    Column("fingerprint", JSON, nullable=False),
    Column("first_seen_at", Float, nullable=False),
    Column("last_seen_at", Float, nullable=False),
)

reference_sets = Table(
    "reference_sets",  # the whole engine fingerprint each reference set was built with
    metadata,
    Column("fingerprint_id", String(64), primary_key=True),
    Column("profile", String(200), nullable=False),
    Column("fingerprint", JSON, nullable=False),
    Column("created_at", Float, nullable=False),
)

reference_prompts = Table(
    "reference_prompts",
    metadata,
    Column("ref_id", String(64), primary_key=True),
    Column("profile", String(200), nullable=False),
    Column("fingerprint_id", String(64), nullable=False),
    Column("prompt", Text, nullable=False),
    Column("answer", JSON, nullable=False),  # list[int]
    Column("created_at", Float, nullable=False),
    Column("spent_round", String(200), nullable=True),
    Index("ix_reference_prompts_fp_spent", "fingerprint_id", "spent_round"),
)

rounds = Table(
    "rounds",
    metadata,
    Column("round_id", String(200), primary_key=True),
    Column("profile", String(200), nullable=False),
    Column("batch_size", Integer, nullable=False),
    Column("max_new_tokens", Integer, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float, nullable=True),
    Column("status", String(50), nullable=False),  # "planned", then the caller's status
    Column("skipped", JSON, nullable=False),  # [[node_key, reason], ...]
    Column("timing", JSON, nullable=True),  # round-level timings (record_outcome)
    Column("summary", JSON, nullable=True),
    # Order of persistence, assigned by the database (an identity column on PostgreSQL;
    # max + 1 under SQLite's write lock, see Store.record_plan). "Most recent" means
    # highest seq: started_at is wall-clock time and can step back.
    Column("seq", BigInteger, Identity(), nullable=False),
    Index("ix_rounds_started_at", "started_at"),
    Index("ix_rounds_seq", "seq", unique=True),
)

assignments = Table(
    "assignments",
    metadata,
    Column("id", RowId, primary_key=True, autoincrement=True),
    Column("round_id", String(200), ForeignKey("rounds.round_id"), nullable=False),
    Column("node_key", String(64), nullable=False),
    Column("prompts", JSON, nullable=False),  # list[str], the whole mixed batch in order
    Column("canary_ids", JSON, nullable=False),  # list[str], aligned with positions
    Column("positions", JSON, nullable=False),  # list[int]
    Column("job_key", String(64), nullable=False),  # hex; the coordinator is trusted
    Column("job_nonce", String(64), nullable=False),  # hex
    UniqueConstraint("round_id", "node_key", name="uq_assignments_round_node"),
)

results = Table(
    "results",
    metadata,
    Column("id", RowId, primary_key=True, autoincrement=True),
    Column("round_id", String(200), ForeignKey("rounds.round_id"), nullable=False),
    Column("node_key", String(64), nullable=False),
    Column("session_id", String(64), nullable=True),  # hex
    Column("released_ns", BigInteger, nullable=True),
    Column("arrived_ns", BigInteger, nullable=True),
    Column("rtt_s", Float, nullable=True),
    Column("outputs", JSON, nullable=True),  # list[list[int]]
    Column("commitment", String(128), nullable=True),  # hex
    Column("signature", String(256), nullable=True),  # hex
    Column("error", Text, nullable=True),
    Column("extra", JSON, nullable=True),  # other per-node timing keys
    UniqueConstraint("round_id", "node_key", name="uq_results_round_node"),
    Index("ix_results_node", "node_key"),  # a node's rounds (pooled confirmation rounds)
)

verdicts = Table(
    "verdicts",
    metadata,
    Column("id", RowId, primary_key=True, autoincrement=True),
    Column("round_id", String(200), ForeignKey("rounds.round_id"), nullable=False),
    Column("node_key", String(64), nullable=False),
    Column("verdict", String(50), nullable=False),
    Column("reason", Text, nullable=False),
    Column("elapsed_s", Float, nullable=True),
    Column("canaries_checked", Integer, nullable=False),
    Column("canaries_matched", Integer, nullable=False),
    Column("recorded_at", Float, nullable=False),
    Column("passed", Boolean, nullable=False),
    UniqueConstraint("round_id", "node_key", name="uq_verdicts_round_node"),
    Index("ix_verdicts_node", "node_key"),
)

# Detection (netcheck.storage.flags) and review (netcheck.storage.reviews) tables: here
# with the others, so the schema a process creates never depends on what it imported.

round_schedules = Table(
    "round_schedules",
    metadata,
    Column("round_id", String(200), ForeignKey("rounds.round_id"), primary_key=True),
    Column("profile", String(200), nullable=False),
    Column("kind", String(50), nullable=False),  # ROUND_KINDS
    Column("rule", String(100), nullable=False),  # how the bits were drawn, e.g. hmac
    Column("schedule", JSON, nullable=False),  # {node_key: bool}, every connected node
    Column("context", JSON, nullable=True),  # e.g. {"group": [...]} of a confirmation
    Column("recorded_at", Float, nullable=False),
    Index("ix_round_schedules_profile_kind", "profile", "kind"),
)

flags = Table(
    "flags",
    metadata,
    Column("flag_id", RowId, primary_key=True, autoincrement=True),
    Column("kind", String(50), nullable=False),
    Column("status", String(50), nullable=False),  # FLAG_STATUSES
    Column("profile", String(200), nullable=False),
    Column("node_keys", JSON, nullable=False),  # sorted list[str]
    Column("created_at", Float, nullable=False),
    Column("statistic", Float, nullable=True),
    Column("threshold", Float, nullable=True),
    Column("evidence", JSON, nullable=False),
    Index("ix_flags_kind_status", "kind", "status"),
)

MAX_BY_CHARS = 200
"""Longest reviewer name in ``flag_reviews.by``."""

flag_reviews = Table(
    "flag_reviews",
    metadata,
    Column("id", RowId, primary_key=True, autoincrement=True),
    Column("flag_id", RowId, ForeignKey(flags.c.flag_id), nullable=False, index=True),
    Column("state", String(50), nullable=False),
    Column("by", String(MAX_BY_CHARS), nullable=False),
    Column("note", Text, nullable=False),
    Column("at", Float, nullable=False),
)
