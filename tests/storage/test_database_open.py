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

from sqlalchemy import inspect

from netcheck.storage import Store

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
