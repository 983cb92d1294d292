"""Row ids are 64-bit: tables that grow with rounds x nodes (assignments, results,
verdicts) and the flag tables pass 2^31 rows in about 149 days at 10,000 nodes and a
round a minute. PostgreSQL databases created with int4 ids (``SERIAL``) are upgraded in
place when opened (:mod:`netcheck.storage.migrate`)."""

from __future__ import annotations

import sqlite3

from sqlalchemy import create_engine, select, text

from netcheck.records import Assignment, NodeOutcome, RoundPlan, Verdict
from netcheck.storage import Store
from netcheck.storage.flags import FlagStore
from netcheck.storage.migrate import ID_COLUMNS
from netcheck.storage.reviews import ReviewStore
from netcheck.storage.tables import results

PAST_INT4 = 2**31 + 7


def _plan(round_id: str, node: str) -> RoundPlan:
    job = Assignment(node, ("p0", "p1"), (), (), (), bytes(32), bytes(12))
    return RoundPlan(round_id, "cpu-tiny", 2, 2, (job,), ())


def _record_round(store: Store, round_id: str, node: str) -> None:
    store.record_plan(_plan(round_id, node), 1.0)
    store.record_outcome(round_id, [NodeOutcome(node, Verdict.PASS, "ok", 0.5, 0, 0)], {})


def _column_types(url: str) -> dict[tuple[str, str], str]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema()"
            )
        )
        types = {(r.table_name, r.column_name): r.data_type for r in rows}
        for table, column, owned in ID_COLUMNS:
            if owned:
                seq = conn.execute(
                    text("SELECT pg_get_serial_sequence(:t, :c)"), {"t": table, "c": column}
                ).scalar_one()
                types[(seq, "sequence")] = conn.execute(
                    text("SELECT data_type::text FROM pg_sequences WHERE "
                         "(quote_ident(schemaname) || '.' || quote_ident(sequencename))"
                         " = :s OR sequencename = :s"),
                    {"s": seq},
                ).scalar_one()  # fmt: skip
    engine.dispose()
    return types


def _narrow_to_int4(url: str) -> None:
    """Turn a database made by this version into one made before 64-bit ids: int4
    columns and ``AS integer`` sequences, as ``SERIAL`` created them."""
    engine = create_engine(url)
    with engine.begin() as conn:
        for table, column, owned in reversed(ID_COLUMNS):
            conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE INTEGER"))
            if owned:
                seq = conn.execute(
                    text("SELECT pg_get_serial_sequence(:t, :c)"), {"t": table, "c": column}
                ).scalar_one()
                conn.execute(text(f"ALTER SEQUENCE {seq} AS INTEGER"))
    engine.dispose()


def _bump_sequences(url: str, to: int) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        for table, column, owned in ID_COLUMNS:
            if owned:
                conn.execute(
                    text("SELECT setval(pg_get_serial_sequence(:t, :c), :v)"),
                    {"t": table, "c": column, "v": to},
                )
    engine.dispose()


def test_a_fresh_postgres_database_has_64_bit_ids(pg_url: str) -> None:
    """Every row id, its sequence and the foreign key to flags are bigint."""
    Store(pg_url).close()
    types = _column_types(pg_url)
    for table, column, _owned in ID_COLUMNS:
        assert types[(table, column)] == "bigint", (table, column)
    assert {v for (_t, c), v in types.items() if c == "sequence"} == {"bigint"}


def test_an_int4_database_is_upgraded_in_place_and_takes_ids_past_2_31(pg_url: str) -> None:
    """An old database (int4 ids, int4 sequences, rows in it) opened by this version
    gets bigint columns and sequences, keeps its rows, and stores and reads back ids
    above 2^31 (before: 'nextval: reached maximum value of sequence')."""
    store = Store(pg_url)
    _record_round(store, "old", "n1")
    flag_id = FlagStore(store).add_flag("slow", "confirmed", "cpu-tiny", ["n1"], 1.0, 2.0, {})
    ReviewStore(store).review(flag_id, "acknowledged", "ana")
    store.close()
    _narrow_to_int4(pg_url)
    assert _column_types(pg_url)[("results", "id")] == "integer"

    store = Store(pg_url)
    types = _column_types(pg_url)
    for table, column, _owned in ID_COLUMNS:
        assert types[(table, column)] == "bigint", (table, column)
    assert {v for (_t, c), v in types.items() if c == "sequence"} == {"bigint"}
    assert store.result_row("old", "n1") is not None  # rows kept

    _bump_sequences(pg_url, PAST_INT4)
    _record_round(store, "new", "n2")
    row = store.result_row("new", "n2")
    assert row is not None and row["id"] > 2**31
    with store._read("check") as conn:
        assert conn.execute(select(results.c.node_key).where(results.c.id == row["id"])).scalar()
    flags = FlagStore(store)
    big = flags.add_flag("slow", "confirmed", "cpu-tiny", ["n2"], 1.0, 2.0, {})
    assert big > 2**31 and flags.get_flag(big) is not None
    reviews = ReviewStore(store)
    reviews.review(big, "acknowledged", "ana")
    assert reviews.current([big])[big]["state"] == "acknowledged"
    assert flags.get_flag(2**63 - 1) is None  # the column's bound: no row, no error
    store.close()


def test_sqlite_ids_stay_integer_primary_keys(tmp_path: object) -> None:
    """On SQLite the ids stay ``INTEGER PRIMARY KEY`` (the rowid, 64-bit, the only
    spelling that autoincrements) and take values past 2^31."""
    path = f"{tmp_path}/n.db"
    store = Store(f"sqlite:///{path}")
    raw = sqlite3.connect(path)
    for table, column, owned in ID_COLUMNS:
        info = {r[1]: (r[2], r[5]) for r in raw.execute(f"PRAGMA table_info({table})")}
        assert info[column] == ("INTEGER", 1 if owned else 0), (table, column)
    raw.close()
    with store._write("bump") as conn:
        conn.execute(text(f"INSERT INTO flags (flag_id, kind, status, profile, node_keys, "
                          f"created_at, evidence) VALUES ({PAST_INT4}, 'slow', 'confirmed', "
                          "'p', '[]', 0, '{}')"))  # fmt: skip
    flags = FlagStore(store)
    assert flags.add_flag("slow", "confirmed", "p", ["n"], 1.0, 2.0, {}) == PAST_INT4 + 1
    store.close()


def test_processes_widening_one_int4_database_at_once_all_succeed(pg_url: str) -> None:
    """Six processes open one int4 database together: the widening runs once, under the
    schema's advisory lock; the others find it done (no 'column ... is of type bigint'
    race, no error)."""
    from test_database_open import _open_at_once

    store = Store(pg_url)
    _record_round(store, "old", "n1")
    store.close()
    _narrow_to_int4(pg_url)
    assert _open_at_once(pg_url, 6) == []
    assert _column_types(pg_url)[("verdicts", "id")] == "bigint"


def test_an_opener_waits_for_the_schema_lock_longer_than_its_lock_timeout(pg_url: str) -> None:
    """Another process upgrading the schema holds its DDL lock for longer than an ordinary
    write's lock timeout (widening rewrites tables): an opener waits for it
    (``SCHEMA_LOCK_WAIT_MS``) instead of failing with "database is locked" (seen in the
    suite on a loaded machine: one of six openers gave up at 5 s)."""
    import threading
    import time

    from netcheck.storage.database import SCHEMA_LOCK

    Store(pg_url).close()
    holder = create_engine(pg_url).connect()
    holder.execute(
        text("SELECT pg_advisory_lock(:k, hashtext(current_schema()))"), {"k": SCHEMA_LOCK}
    )
    unlock = threading.Timer(
        1.5,
        lambda: holder.execute(
            text("SELECT pg_advisory_unlock(:k, hashtext(current_schema()))"), {"k": SCHEMA_LOCK}
        ),
    )
    unlock.start()
    try:
        t0 = time.monotonic()
        Store(pg_url, busy_timeout_ms=200).close()  # would fail after 0.2 s before
        waited = time.monotonic() - t0
    finally:
        unlock.join()
        holder.close()
    assert waited >= 1.0
