"""Storage faults: a database locked by another writer, and a full disk.

Each surfaces as a :class:`StorageError` with a clear message; the failed transaction
leaves nothing behind (no silent partial write), and a round that cannot persist its
plan sends nothing to any node and spends no canary.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_support import light_profile
from sqlalchemy import create_engine, text

from netcheck.coordinator.rounds import run_round
from netcheck.errors import StorageError
from netcheck.lab.load import HashWorker, add_hash_references
from netcheck.lab.testing import running_coordinator
from netcheck.storage import Store

PROFILE = light_profile()


@contextlib.contextmanager
def write_lock(url: str) -> Iterator[None]:
    """Another connection holding a write lock on the database at ``url``."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    engine = create_engine(url)
    try:
        with engine.connect() as sa_conn, sa_conn.begin():
            sa_conn.execute(text("LOCK TABLE rounds, reference_prompts IN EXCLUSIVE MODE"))
            yield
    finally:
        engine.dispose()


async def test_locked_database_fails_round_cleanly(tmp_path: Path, db_url: str) -> None:
    """With the database write-locked elsewhere, run_round raises 'database is locked'
    before any job is sent; once the lock is gone the next round runs normally."""
    store = Store(db_url, busy_timeout_ms=300)
    add_hash_references(store, PROFILE, 30)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        workers = [HashWorker(PROFILE.max_new_tokens) for _ in range(3)]
        for w in workers:
            rc.start(rc.node(w, PROFILE.name))
        await rc.wait_connected(3, timeout_s=10.0)
        with write_lock(db_url), pytest.raises(StorageError, match="database is locked"):
            await run_round(rc.coord, PROFILE.name)
        assert store.list_rounds() == []
        assert store.canary_ids_used() == []
        assert all(w.batches == 0 for w in workers)
        report = await run_round(rc.coord, PROFILE.name)
        assert {str(o.verdict) for o in report.outcomes} == {"pass"}
        assert len(store.round_verdicts(report.round_id)) == 3


@contextlib.contextmanager
def small_disk(path: Path, size: str = "512k") -> Iterator[Path]:
    """A tiny tmpfs at ``path`` (needs root and mount); skips when it cannot be made."""
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill_until_full(store: Store) -> StorageError:
    for i in range(10_000):
        before = store.count_references()
        try:
            add_hash_references(store, PROFILE, 200, tag=f"fill{i}")
        except StorageError as exc:
            assert store.count_references() == before  # the failed batch left nothing
            return exc
    raise AssertionError("the disk never filled")


@pytest.mark.parametrize("how", ["tmpfs", "max_page_count"])
def test_disk_full(tmp_path: Path, how: str) -> None:
    """Writes on a full disk raise 'disk full'; the failed transaction stores nothing and
    what was stored before stays readable."""
    with contextlib.ExitStack() as stack:
        if how == "tmpfs":
            where = stack.enter_context(small_disk(tmp_path / "disk"))
            store = Store(f"sqlite:///{where / 'netcheck.db'}")
        else:
            store = Store(f"sqlite:///{tmp_path / 'capped.db'}")
            with store._engine.connect() as conn:  # every pooled connection is this one
                conn.exec_driver_sql("PRAGMA max_page_count = 64")
        stack.callback(store.close)
        exc = _fill_until_full(store)
        assert "disk full" in str(exc)
        kept = store.count_references()
        assert kept > 0 and len(store.unspent_canaries("x", 1)) == 0
