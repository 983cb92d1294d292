"""Opening a database next to other processes: the schema does not depend on what the
opener imported, and creating tables waits for a concurrent writer instead of failing.

Regression for CI's ``create tables: database is locked``: the demo's reference builder
(which had imported only :mod:`netcheck.storage`) created the database without the
detection tables; the coordinator then created them in a deferred transaction that
failed at once when it upgraded to a write while a builder thread held the write lock.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from sqlalchemy import create_engine, inspect, text

from netcheck.records import RoundPlan
from netcheck.storage import Store
from netcheck.storage.presence import Presence

DETECTION_TABLES = {"round_schedules", "flags", "flag_reviews"}


def test_a_process_that_imports_only_the_store_creates_every_table(tmp_path: Path) -> None:
    db = tmp_path / "n.db"
    code = f"from netcheck.storage import Store; Store('sqlite:///{db}').close()"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    names = set(sqlite3.connect(db).execute("SELECT name FROM sqlite_master").fetchall())
    assert {n for (n,) in names} >= DETECTION_TABLES


def test_creating_missing_tables_waits_for_a_writer_in_another_connection(
    tmp_path: Path,
) -> None:
    db = tmp_path / "n.db"
    url = f"sqlite:///{db}"
    Store(url).close()
    raw = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    raw.execute("DROP TABLE verdicts")  # an older or partial schema: one table missing
    raw.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock ...
    raw.execute("UPDATE nodes SET node_key = node_key")
    held = threading.Timer(0.5, lambda: raw.execute("COMMIT"))  # ... for half a second
    held.start()
    t0 = time.monotonic()
    try:
        store = Store(url)  # must wait (busy timeout 5 s), not fail on the lock upgrade
    finally:
        held.join()
        raw.close()
    assert time.monotonic() - t0 >= 0.4
    with store._read("check") as conn:
        assert "verdicts" in inspect(conn).get_table_names()
    store.close()


def test_processes_opening_one_fresh_postgres_database_at_once_all_succeed(
    pg_url: str,
) -> None:
    # Gateways of one deployment started together on a fresh database: each creates the
    # tables. Without a lock around the DDL, all but one failed with
    # 'duplicate key value violates unique constraint "pg_type_typname_nsp_index"'.
    assert _open_at_once(pg_url, 6) == []
    store = Store(pg_url)
    with store._read("check") as conn:
        assert set(inspect(conn).get_table_names()) >= DETECTION_TABLES
    store.close()


def test_processes_upgrading_one_old_database_at_once_all_succeed(db_url: str) -> None:
    # An older database (no rounds.seq, no ix_results_node) opened by several processes
    # at once: each finds it stale; the upgrade runs once and the others find it done
    # (PostgreSQL: without the lock, 'column "seq" of relation "rounds" already exists').
    store = Store(db_url)
    store.record_plan(RoundPlan("a", "p", 2, 2, (), ()), 10.0)
    store.close()
    engine = create_engine(store._engine.url)  # same URL (and PostgreSQL search_path)
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_rounds_seq"))
        conn.execute(text("ALTER TABLE rounds DROP COLUMN seq"))
        conn.execute(text("DROP INDEX ix_results_node"))
    engine.dispose()
    assert _open_at_once(db_url, 6) == []
    store = Store(db_url)
    assert [(r["round_id"], r["seq"]) for r in store.list_rounds()] == [("a", 1)]
    store.close()


def test_gateways_creating_their_tables_at_once_all_succeed(pg_url: str) -> None:
    # The gateway tables (Presence) are created after the store's, by each gateway.
    Store(pg_url).close()
    assert _open_at_once(pg_url, 6, gateway=True) == []


def _open_at_once(url: str, openers: int, *, gateway: bool = False) -> list[BaseException]:
    """Open ``url`` (with ``gateway``: and its gateway tables) from ``openers`` threads
    released together; the errors raised."""
    barrier = threading.Barrier(openers)
    errors: list[BaseException] = []

    def open_store() -> None:
        barrier.wait()
        try:
            with Store(url) as store:
                if gateway:
                    Presence(store)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(openers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return errors
