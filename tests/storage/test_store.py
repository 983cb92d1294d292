"""Tests for netcheck.storage.Store on SQLite and PostgreSQL (``db_url``, tests/conftest.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from netcheck.errors import StorageError
from netcheck.records import Assignment, NodeOutcome, NodeRecord, NodeTiming, RoundPlan, Verdict
from netcheck.storage import ReferenceRow, Store

FP = "f" * 64


def refs(n: int, fp: str = FP, start: int = 0) -> list[ReferenceRow]:
    return [
        ReferenceRow(f"r{i:03d}", "cpu-tiny", fp, f"prompt {i}", (i, i + 1), float(i))
        for i in range(start, start + n)
    ]


def plan(round_id: str, canary_sets: dict[str, list[str]]) -> RoundPlan:
    assignments = tuple(
        Assignment(
            node_key=node,
            prompts=tuple(f"{node} p{j}" for j in range(4)),
            canary_positions=tuple(range(len(ids))),
            canary_ids=tuple(ids),
            canary_answers=tuple((0, 1) for _ in ids),
            job_key=bytes(32),
            job_nonce=bytes(12),
        )
        for node, ids in canary_sets.items()
    )
    return RoundPlan(round_id, "cpu-tiny", 4, 2, assignments, (("nz", "no canaries"),))


@pytest.fixture
def db(db_url: str) -> str:
    return db_url


@pytest.fixture
def store(db: str) -> Store:
    s = Store(db)
    s.add_references(refs(10))
    return s


def test_sqlite_pragmas(store: Store, db: str) -> None:
    """SQLite runs in WAL mode with foreign keys on and a busy timeout."""
    if not db.startswith("sqlite"):
        pytest.skip("SQLite pragmas")
    with store._engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000


def test_references_counts(store: Store) -> None:
    """References are stored, counted and drawn oldest first."""
    store.add_references(refs(3, fp="e" * 64, start=100))
    assert store.count_references() == 13
    assert store.count_references(FP) == 10
    got = store.unspent_canaries(FP, 4)
    assert [r.ref_id for r in got] == ["r000", "r001", "r002", "r003"]
    assert got[1] == refs(10)[1]
    with pytest.raises(StorageError, match="add references: integrity constraint"):
        store.add_references(refs(1))


def test_record_plan_spends_canaries(store: Store) -> None:
    """A recorded plan stores round and assignments and marks its canaries spent."""
    store.record_plan(plan("R1", {"n1": ["r000", "r001"], "n2": ["r005"]}), started_at=10.0)
    assert store.canary_ids_used() == ["r000", "r001", "r005"]
    assert store.count_references(FP, unspent_only=True) == 7
    assert "r000" not in {r.ref_id for r in store.unspent_canaries(FP, 100)}
    (rnd,) = store.list_rounds()
    assert rnd["round_id"] == "R1" and rnd["status"] == "planned"
    assert rnd["skipped"] == [["nz", "no canaries"]]
    rows = store.round_assignments("R1")
    assert [r["node_key"] for r in rows] == ["n1", "n2"]
    assert rows[0]["canary_ids"] == ["r000", "r001"] and rows[0]["positions"] == [0, 1]
    assert rows[0]["job_key"] == "00" * 32 and rows[0]["prompts"][0] == "n1 p0"


def test_double_spend_raises_and_rolls_back(store: Store) -> None:
    """A plan reusing a spent canary raises StorageError and stores nothing."""
    store.record_plan(plan("R1", {"n1": ["r000"]}), started_at=1.0)
    with pytest.raises(StorageError, match="already spent"):
        store.record_plan(plan("R2", {"n1": ["r001"], "n2": ["r000"]}), started_at=2.0)
    assert [r["round_id"] for r in store.list_rounds()] == ["R1"]
    assert store.canary_ids_used() == ["r000"]
    assert store.round_assignments("R2") == []


def test_unknown_canary_and_duplicate_in_plan(store: Store) -> None:
    """An unknown canary id or one canary twice in a plan is refused."""
    with pytest.raises(StorageError, match="unknown or already spent"):
        store.record_plan(plan("R1", {"n1": ["nope"]}), started_at=1.0)
    with pytest.raises(StorageError, match="appears twice"):
        store.record_plan(plan("R1", {"n1": ["r001"], "n2": ["r001"]}), started_at=1.0)
    assert store.list_rounds() == []


def outcomes() -> list[NodeOutcome]:
    return [
        NodeOutcome("n1", Verdict.PASS, "ok", 0.5, 2, 2),
        NodeOutcome("n2", Verdict.WRONG_ANSWER, "bad", 0.7, 1, 0),
    ]


def test_record_outcome_idempotent(store: Store) -> None:
    """Recording the same (round, node) twice stores it once; the first record wins."""
    store.record_plan(plan("R1", {"n1": ["r000", "r001"], "n2": ["r002"]}), started_at=1.0)
    records = {
        "n1": NodeRecord(
            NodeTiming(release_start_ns=100, release_end_ns=120, arrived_ns=600),
            session_id=b"\x01" * 16,
            outputs=[[1, 2], [3, 4]],
            commitment=b"\xaa" * 32,
            signature=b"\xbb" * 64,
            extra={"gateway": "g1"},
        ),
        "n2": NodeRecord(NodeTiming(release_start_ns=5), error="engine failed"),
    }
    assert store.record_outcome("R1", outcomes(), records, {"release_skew_ns": 42}) == 2
    redo = [NodeOutcome("n1", Verdict.LATE, "changed", 9.0, 2, 2)]
    assert store.record_outcome("R1", redo, {}) == 0
    rows = store.round_verdicts("R1")
    assert [(r["node_key"], r["verdict"], r["passed"]) for r in rows] == [
        ("n1", "pass", True),
        ("n2", "wrong-answer", False),
    ]
    n1, n2 = rows
    assert (n1["released_ns"], n1["arrived_ns"]) == (100, 600)
    assert n1["session_id"] == "01" * 16 and n1["commitment"] == "aa" * 32
    assert n1["signature"] == "bb" * 64
    assert {k: v for k, v in n1["extra"].items() if v not in (None, 0, [])} == {
        "release_start_ns": 100, "release_end_ns": 120, "gateway": "g1",
    }  # fmt: skip
    assert (n2["released_ns"], n2["error"]) == (5, "engine failed")
    assert store.list_rounds()[0]["timing"] == {"release_skew_ns": 42}


def test_untimed_record_stores_only_its_extra(store: Store) -> None:
    """A record without timing (a lost gateway's node) stores NULL columns and only its
    ``extra`` facts: the row the gateway leader's ``{"gateway": g}`` mapping gave."""
    store.record_plan(plan("R1", {"n1": ["r000"]}), started_at=1.0)
    lost = NodeOutcome("n1", Verdict.DISCONNECTED, "gateway gw-2 lost mid-round", None, 1, 0)
    store.record_outcome("R1", [lost], {"n1": NodeRecord(extra={"gateway": "gw-2"})})
    assert store.result_row("R1", "n1") == {
        "id": 1, "round_id": "R1", "node_key": "n1", "session_id": None, "released_ns": None,
        "arrived_ns": None, "rtt_s": None, "outputs": None, "commitment": None,
        "signature": None, "error": None, "extra": {"gateway": "gw-2"},
    }  # fmt: skip
    with pytest.raises(ValueError, match="may not hold record fields"):
        NodeRecord(extra={"rtt_s": 1.0})


def test_outcome_unknown_round(store: Store) -> None:
    """Outcomes for an unknown round are refused."""
    with pytest.raises(StorageError, match="unknown round"):
        store.record_outcome("nope", outcomes(), {})
    with pytest.raises(StorageError, match="unknown round"):
        store.finish_round("nope", "complete", {})


def test_nodes_and_reopen(store: Store, db: str) -> None:
    """Nodes upsert; a reopened database file keeps every row."""
    store.upsert_node("k1", "a", "cpu-tiny", FP, {"engine": "torch"}, seen_at=1.0)
    store.upsert_node("k1", "b", "cpu-tiny", FP, {"engine": "torch"}, seen_at=2.0)
    store.record_plan(plan("R1", {"k1": ["r003"]}), started_at=1.0)
    store.finish_round("R1", "complete", {"total_s": 1.5, "key": b"\x00"}, finished_at=3.0)
    store.close()
    again = Store(db)
    (node,) = again.list_nodes()
    assert (node["name"], node["first_seen_at"], node["last_seen_at"]) == ("b", 1.0, 2.0)
    assert node["fingerprint"] == {"engine": "torch"}
    (rnd,) = again.list_rounds()
    assert (rnd["status"], rnd["finished_at"]) == ("complete", 3.0)
    assert rnd["summary"] == {"total_s": 1.5, "key": "00"}
    assert again.canary_ids_used() == ["r003"]
    assert again.count_references() == 10


def test_locked_database_maps_to_storage_error(tmp_path: Path) -> None:
    """A write blocked by another process's lock surfaces as 'database is locked'."""
    path = tmp_path / "l.db"
    fast = Store(f"sqlite:///{path}", busy_timeout_ms=0)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StorageError, match="database is locked"):
            fast.add_references(refs(1))
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_bad_url() -> None:
    """An unusable URL is a StorageError."""
    with pytest.raises(StorageError, match="cannot open database"):
        Store("nosuchdialect://x")


def test_a_file_that_is_not_a_database_is_named(tmp_path: Path) -> None:
    """Opening a SQLite file that is not a database said only 'create tables: file is
    not a database': now the error names the database (and hides a password)."""
    path = tmp_path / "garbage.db"
    path.write_bytes(b"not a database at all, just text" * 64)
    with pytest.raises(StorageError, match="cannot open database .*garbage.db.*not a database"):
        Store(f"sqlite:///{path}")
    with pytest.raises(StorageError) as info:
        Store("postgresql+psycopg://user:s3cret@127.0.0.1:1/x")
    assert "s3cret" not in str(info.value) and "cannot open database" in str(info.value)


@pytest.mark.parametrize("url", ["garbage", "", "postgresql://user:s3cret@host:notaport/x"])
def test_a_url_that_does_not_parse_is_a_storage_error(url: str) -> None:
    """``database = "garbage"`` (or a port that is not a number) left SQLAlchemy's
    ArgumentError/ValueError uncaught: `coordinator serve` died with a traceback. Now a
    StorageError that does not echo the URL (it may hold a password)."""
    with pytest.raises(StorageError, match="not a database URL") as info:
        Store(url)
    assert "s3cret" not in str(info.value)


def test_memory_database() -> None:
    """sqlite:// keeps data across calls of one Store."""
    s = Store("sqlite://")
    s.add_references(refs(2))
    assert s.count_references() == 2


def test_double_spend_across_stores(db: str) -> None:
    """Two Store objects on one file cannot both spend the same canary."""
    first, second = Store(db), Store(db)
    first.add_references(refs(2))
    first.record_plan(plan("R1", {"n1": ["r000"]}), started_at=1.0)
    with pytest.raises(StorageError, match="already spent"):
        second.record_plan(plan("R2", {"n2": ["r000"]}), started_at=2.0)
    assert second.canary_ids_used() == ["r000"]


def test_abort_unfinished_rounds(store: Store) -> None:
    """Rounds left unfinished are marked aborted; their canaries stay spent."""
    store.record_plan(plan("R1", {"n1": ["r000"]}), started_at=1.0)
    store.record_plan(plan("R2", {"n1": ["r001"]}), started_at=2.0)
    store.finish_round("R2", "complete", {}, finished_at=3.0)
    assert store.abort_unfinished_rounds(finished_at=4.0) == 1
    assert store.abort_unfinished_rounds() == 0
    status = {r["round_id"]: (r["status"], r["finished_at"]) for r in store.list_rounds()}
    assert status == {"R1": ("aborted", 4.0), "R2": ("complete", 3.0)}
    assert store.canary_ids_used() == ["r000", "r001"]


def test_database_error_hides_user_and_query_password() -> None:
    """The 'cannot open database' error hid only the userinfo password (SQLAlchemy's
    hide_password): a ``?password=`` parameter (libpq reads one) was shown. Now both,
    and the user name, are hidden (netcheck.redact)."""
    with pytest.raises(StorageError) as info:
        Store("postgresql+psycopg://alice:s3cret@127.0.0.1:1/x?password=qp4ss")
    text = str(info.value)
    assert "cannot open database 'postgresql+psycopg://***@127.0.0.1:1/x?password=***'" in text
    assert "s3cret" not in text and "qp4ss" not in text and "alice" not in text
