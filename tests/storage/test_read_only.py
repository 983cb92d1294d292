"""Opening a database read-only (``Database(read_only=True)``), for commands that only
read: a SQLite file on a read-only mount (or one this user may not write) opens, reads
work, and a write says that the database was opened read-only."""

from __future__ import annotations

from pathlib import Path

import pytest
from readonly_support import as_reader, read_only_folder

from netcheck.errors import StorageError
from netcheck.records import RoundPlan
from netcheck.storage import Store


def _fill(folder: Path) -> None:
    with Store(f"sqlite:///{folder / 'n.db'}") as store:
        store.record_plan(RoundPlan("r1", "p", 2, 2, (), ()), 1.0)


def _open_both_ways(url: str) -> dict[str, object]:
    out: dict[str, object] = {}
    try:
        Store(url).close()
        out["plain"] = "opened"
    except StorageError as exc:
        out["plain"] = str(exc)
    store = Store(url, read_only=True)
    out["rounds"] = [r["round_id"] for r in store.list_rounds()]
    out["immutable"] = store.immutable
    try:
        store.record_plan(RoundPlan("r2", "p", 2, 2, (), ()), 2.0)
    except StorageError as exc:
        out["write"] = str(exc)
    store.close()
    return out


def test_a_sqlite_file_in_a_read_only_folder_opens_read_only() -> None:
    """A copy on a read-only mount (file and folder not writable; WAL database, no
    ``-shm`` beside it): a plain open fails (as before),
    a read-only open reads it (as ``immutable=1``: SQLite cannot create the WAL index),
    and a write is refused naming the read-only open."""
    with read_only_folder(_fill) as folder:
        out = as_reader(_open_both_ways, f"sqlite:///{folder / 'n.db'}")
        assert sorted(p.name for p in folder.iterdir()) == ["n.db"]  # nothing created
    # 'unable to open database file' on a read-only mount
    assert "create tables: attempt to write a readonly database" in str(out["plain"])
    assert out["rounds"] == ["r1"] and out["immutable"] is True
    assert "record plan r2: needs to write, but the database was opened read-only" in str(
        out["write"]
    )


def test_a_read_only_open_sees_a_live_writer(tmp_path: Path) -> None:
    """Beside a running coordinator (folder writable) the file opens ``mode=ro``, not
    as immutable, so rows written after the open are read."""
    url = f"sqlite:///{tmp_path / 'n.db'}"
    writer = Store(url)
    writer.record_plan(RoundPlan("r1", "p", 2, 2, (), ()), 1.0)
    reader = Store(url, read_only=True)
    assert not reader.immutable
    writer.record_plan(RoundPlan("r2", "p", 2, 2, (), ()), 2.0)
    assert [r["round_id"] for r in reader.list_rounds()] == ["r2", "r1"]
    reader.close()
    writer.close()


def test_a_missing_file_is_not_created_read_only(tmp_path: Path) -> None:
    """No file: a clear error, and neither file nor folder is created."""
    path = tmp_path / "sub" / "none.db"
    with pytest.raises(StorageError, match="no file at"):
        Store(f"sqlite:///{path}", read_only=True)
    assert not path.parent.exists()


def test_read_only_refuses_writes_on_every_backend(db_url: str) -> None:
    """PostgreSQL too: reads work, a write is refused before the server (whose sessions
    are read-only as well)."""
    Store(db_url).close()
    store = Store(db_url, read_only=True)
    assert store.list_rounds() == []
    with pytest.raises(StorageError, match="opened read-only"):
        store.record_plan(RoundPlan("r1", "p", 2, 2, (), ()), 1.0)
    with store._engine.connect() as conn:  # the server's own guard (PostgreSQL)
        if store.backend == "postgresql":
            from sqlalchemy import text

            with pytest.raises(Exception, match="read-only transaction"):
                conn.execute(text("CREATE TABLE x (a int)"))
    store.close()


def _open_read_only(url: str) -> str:
    try:
        Store(url, read_only=True).close()
    except StorageError as exc:
        return str(exc)
    return "opened"


def test_a_file_this_user_cannot_read_says_so() -> None:
    """A file without read permission: the open says so (not a misleading fallback)."""

    with read_only_folder(_fill) as folder:
        (folder / "n.db").chmod(0)  # read_only_folder made it 0444
        message = as_reader(_open_read_only, f"sqlite:///{folder / 'n.db'}")
    assert message.endswith("n.db is not readable by this user"), message
