"""In-place upgrades of databases created by older netcheck versions.

:func:`upgrade` runs after ``create_all`` (which creates missing tables but never alters
an existing one). Each step checks the live schema first, so it runs once per database
and is a no-op afterwards. Steps:

- ``rounds.seq`` (the persistence order of rounds): added, filled in the order the rows
  would have been listed before (``started_at``, then ``round_id``: the best order known
  for rounds stored before the column existed), made unique, and on PostgreSQL turned
  into an identity column that continues after the highest value.
- ``ix_results_node`` (a node's result rows; confirmation reads a group's earlier
  rounds through it): created.
- 64-bit row ids (PostgreSQL only; SQLite's ids are 64-bit already): the surrogate ids of
  :data:`ID_COLUMNS` (``assignments``, ``results``, ``verdicts``, ``flags``,
  ``flag_reviews``) and the foreign key ``flag_reviews.flag_id``, created as INTEGER
  (``SERIAL``, int4) before session 13, become BIGINT and their sequences ``AS bigint``.
  Each ``ALTER COLUMN ... TYPE`` rewrites its table under an exclusive lock, once: about
  27 s for 1 GB (a million rows in each of the three big tables, measured on two busy
  cores); others opening the schema meanwhile give up after their lock timeout.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection, func, inspect, select, text, update

from netcheck.storage.tables import rounds

log = logging.getLogger(__name__)

#: How long a PostgreSQL opener waits for the schema's DDL lock
#: (``netcheck.storage.database.SCHEMA_LOCK``) while another process creates or upgrades
#: the same schema, milliseconds. Longer than the lock timeout of ordinary writes:
#: widening the ids rewrites the tables (about 27 s per GB, :func:`_widen_ids`), and an
#: opener that arrives meanwhile should wait for it, not fail. The statements under the
#: lock keep the ordinary lock timeout.
SCHEMA_LOCK_WAIT_MS = 120_000

#: (table, column, has its own sequence) of every row id and foreign key to one
#: (:data:`netcheck.storage.tables.RowId`). The referenced ``flags.flag_id`` comes before
#: ``flag_reviews.flag_id``.
ID_COLUMNS = (
    ("assignments", "id", True),
    ("results", "id", True),
    ("verdicts", "id", True),
    ("flags", "flag_id", True),
    ("flag_reviews", "id", True),
    ("flag_reviews", "flag_id", False),
)


def upgrade(conn: Connection) -> None:
    """Bring an existing database's tables up to :mod:`netcheck.storage.tables`.

    Runs inside the caller's write transaction (PostgreSQL and SQLite both roll DDL
    back on failure, so a failed upgrade leaves the database as it was).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: a statement failed (the caller maps it).
    """
    if "seq" not in _round_columns(conn):
        _add_round_seq(conn)
    if not _has_results_node_index(conn):
        conn.execute(text("CREATE INDEX ix_results_node ON results (node_key)"))
        log.warning("database upgraded: index ix_results_node added")
    narrow = _int4_ids(conn)
    if narrow:
        _widen_ids(conn, narrow)


def needs_upgrade(conn: Connection) -> bool:
    """Whether :func:`upgrade` has anything to do (a cheap read of the live schema)."""
    return (
        "seq" not in _round_columns(conn)
        or not _has_results_node_index(conn)
        or bool(_int4_ids(conn))
    )


def _int4_ids(conn: Connection) -> list[tuple[str, str, bool]]:
    """The entries of :data:`ID_COLUMNS` still 32-bit (PostgreSQL ``integer``) in the
    current schema; always empty on SQLite."""
    if conn.dialect.name != "postgresql":
        return []
    found = conn.execute(
        text(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND data_type = 'integer'"
        )
    )
    narrow = {(r.table_name, r.column_name) for r in found}
    return [c for c in ID_COLUMNS if (c[0], c[1]) in narrow]


def _widen_ids(conn: Connection, columns: list[tuple[str, str, bool]]) -> None:
    tables = sorted({t for t, _c, _o in columns})
    size = conn.execute(  # what the rewrite reads and writes (row counts would scan)
        text(
            "SELECT pg_size_pretty(sum(pg_total_relation_size(CAST(t AS regclass)))) "
            "FROM unnest(CAST(:names AS text[])) AS t"
        ),
        {"names": tables},
    ).scalar_one()
    log.warning(  # measured: ~27 s per GB (1 million rows in each of the three big tables)
        "database upgrade: widening ids to 64 bits rewrites %s (%s); another process "
        "opening this schema meanwhile waits for it (up to %d s)",
        ", ".join(tables),
        size,
        SCHEMA_LOCK_WAIT_MS // 1000,
    )
    for table, column, owns_sequence in columns:
        conn.execute(text(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" TYPE BIGINT'))
        if owns_sequence:
            seq = conn.execute(
                text("SELECT pg_get_serial_sequence(:t, :c)"), {"t": table, "c": column}
            ).scalar()
            if seq is not None:  # AS bigint also lifts the sequence's maximum to 2^63 - 1
                conn.execute(text(f"ALTER SEQUENCE {seq} AS BIGINT"))
    names = ", ".join(f"{t}.{c}" for t, c, _ in columns)
    log.warning("database upgraded: 64-bit ids (%s)", names)


def _has_results_node_index(conn: Connection) -> bool:
    return any(ix["name"] == "ix_results_node" for ix in inspect(conn).get_indexes("results"))


def _round_columns(conn: Connection) -> set[str]:
    return {c["name"] for c in inspect(conn).get_columns("rounds")}


def _add_round_seq(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE rounds ADD COLUMN seq BIGINT"))
    ranked = select(
        rounds.c.round_id,
        func.row_number().over(order_by=(rounds.c.started_at, rounds.c.round_id)).label("n"),
    ).subquery()
    conn.execute(
        update(rounds).values(seq=ranked.c.n).where(rounds.c.round_id == ranked.c.round_id)
    )
    conn.execute(text("CREATE UNIQUE INDEX ix_rounds_seq ON rounds (seq)"))
    top = int(conn.execute(select(func.coalesce(func.max(rounds.c.seq), 0))).scalar_one())
    if conn.dialect.name == "postgresql":
        conn.execute(text("ALTER TABLE rounds ALTER COLUMN seq SET NOT NULL"))
        conn.execute(
            text(
                "ALTER TABLE rounds ALTER COLUMN seq ADD GENERATED BY DEFAULT AS IDENTITY "
                f"(START WITH {top + 1})"
            )
        )
    log.warning("database upgraded: rounds.seq added (%d existing rounds numbered)", top)
