"""The spool's ``checked`` markers (docs/spool.md): a round entry spooled with
``checks`` stays in the file after its replay until its after-round checks are marked
run; an entry without (a gateway's part of a round) is retired at its replay as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlite_support import locked

from netcheck.errors import StorageError
from netcheck.records import Assignment, NodeOutcome, NodeRecord, RoundPlan, Verdict
from netcheck.storage import Store
from netcheck.storage.durable import Recorder


def test_checked_entries_stay_until_marked_and_replay_gives_the_stored_plan(
    tmp_path: Path,
) -> None:
    db = tmp_path / "netcheck.db"
    store = Store(f"sqlite:///{db}", busy_timeout_ms=50)
    rec = Recorder(store, tmp_path / "spool.jsonl", retry_s=0.1)
    job = Assignment("n1", ("p0", "p1"), (), (), (), b"k" * 32, b"n" * 12)
    for rid in ("r1", "r2"):
        store.record_plan(RoundPlan(rid, "p", 2, 1, (job,), (("n2", "mismatch"),)), 1.0)
    out = [NodeOutcome("n1", Verdict.LATE, "late", 3.0, 1, 1)]
    recs = {"n1": NodeRecord(outputs=[[1], [2]], commitment=b"c" * 32)}
    with locked(db):
        assert rec.end_round("r1", out, recs, status="complete", checks=True) == "spooled"
        assert rec.end_round("r2", out, recs, status=None) == "spooled"  # no checks
        assert rec.unchecked() == []  # not replayed yet
    assert rec.replay().replayed == ["r1/end", "r2/end"]
    assert rec.pending() == {} and rec.spool.path.exists()
    (late,) = rec.unchecked()
    assert (late.entry_id, late.round_id, late.outcomes) == ("r1/end", "r1", tuple(out))
    assert late.records["n1"].outputs == [[1], [2]]
    assert late.plan is not None
    assert late.plan.assignments[0].prompts == ("p0", "p1")
    assert late.plan.assignments[0].job_key == b"k" * 32
    assert late.plan.skipped == (("n2", "mismatch"),) and late.plan.profile == "p"
    assert rec.replay().replayed == []  # a later pass writes nothing again
    rec.mark_checked("r1/end")
    assert rec.unchecked() == [] and not rec.spool.path.exists()
    store.close()


def test_checks_the_spool_refuses_are_held_in_memory_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``defer_checks`` while the spool cannot be written: no error (the round's report
    must still go out), the entry is held in memory and listed for the checks; a later
    spool write (a round spooled once the disk is back) appends the held entry first,
    so the file keeps the order the rounds ended in; a held entry that is checked while
    still held leaves nothing behind. Before, ``defer_checks`` raised and the checks
    were lost."""
    db = tmp_path / "netcheck.db"
    store = Store(f"sqlite:///{db}", busy_timeout_ms=50)
    rec = Recorder(store, tmp_path / "spool.jsonl", retry_s=0.1)
    job = Assignment("n1", ("p0",), (), (), (), b"k" * 32, b"n" * 12)
    for rid in ("r1", "r2", "r3"):
        store.record_plan(RoundPlan(rid, "p", 1, 1, (job,), ()), 1.0)
    out = [NodeOutcome("n1", Verdict.PASS, "ok", 1.0, 1, 1)]
    recs = {"n1": NodeRecord(outputs=[[1]], commitment=b"c" * 32)}
    real_append = rec.spool.append

    def disk_full(entry: Any) -> None:
        raise StorageError("cannot write the spool: [Errno 28] No space left on device")

    monkeypatch.setattr(rec.spool, "append", disk_full)
    assert rec.defer_checks("r1", out, recs) is False
    assert rec.held == ["r1/checks"]
    assert [r.round_id for r in rec.unchecked()] == ["r1"]  # still checked if the db is up
    with locked(db), pytest.raises(StorageError):  # r2 spooled: the held entry blocks it
        rec.end_round("r2", out, recs, status="complete", checks=True)
    monkeypatch.setattr(rec.spool, "append", real_append)
    with locked(db):
        assert rec.end_round("r2", out, recs, status="complete", checks=True) == "spooled"
    assert rec.held == []
    ids = [e["id"] for e in rec.spool.read().checks]
    assert ids == ["r1/checks", "r2/end"]  # the order the rounds ended
    rec.replay()
    assert [r.entry_id for r in rec.unchecked()] == ["r1/checks", "r2/end"]
    for r in rec.unchecked():
        rec.mark_checked(r.entry_id)
    assert not rec.spool.path.exists()

    monkeypatch.setattr(rec.spool, "append", disk_full)
    assert rec.defer_checks("r3", out, recs) is False
    (late,) = rec.unchecked()
    rec.mark_checked(late.entry_id)  # checked while held: nothing to mark in the spool
    assert rec.held == [] and rec.unchecked() == [] and not rec.spool.path.exists()
    store.close()
