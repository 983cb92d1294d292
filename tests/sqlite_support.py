"""Test support: another SQLite connection holding the write lock (the database is
'down' for writers: the bounded retry, then the spool, docs/spool.md)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def locked(db: Path) -> Iterator[None]:
    """Hold SQLite's write lock on ``db`` (``BEGIN IMMEDIATE``) until the block ends."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()
