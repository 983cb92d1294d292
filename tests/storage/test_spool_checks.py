"""The spool's ``checked`` markers (docs/spool.md): a round entry spooled with
``checks`` stays in the file after its replay until its after-round checks are marked
run; an entry without (a gateway's part of a round) is retired at its replay as before."""

from __future__ import annotations

from pathlib import Path

from sqlite_support import locked

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
