"""Adversarial cases of the spool file (docs/spool.md): two processes on one file by
mistake (emulated by two :class:`Spool` objects, each with its own in-process lock)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from netcheck.storage.spool import Spool, SpoolContents


def test_an_entry_appended_while_another_spool_retires_the_file_is_kept(
    tmp_path: Path,
) -> None:
    """Spool A finds nothing pending and is about to remove the file when spool B (another
    process on the same file) appends a round entry: B waits for A's file lock and then
    writes a new file, so its entry is not removed with the old one."""
    path = tmp_path / "spool.jsonl"
    a, b = Spool(path), Spool(path)
    entry = {"type": "round", "id": "r1/end", "round_id": "r1", "outcomes": [],
             "timings": {}, "status": None, "summary": {}, "finished_at": 1.0,
             "canary_ids": [], "spooled_at": 1.0, "reason": "x"}  # fmt: skip
    a.append({**entry, "id": "r0/end", "round_id": "r0"})
    a.mark_replayed("r0/end")
    real_read = a.read
    writer: list[threading.Thread] = []

    def read_then_race() -> SpoolContents:
        got = real_read()
        t = threading.Thread(target=b.append, args=(entry,))
        t.start()
        writer.append(t)
        time.sleep(0.3)  # B's append runs now, unless it waits for A's lock
        return got

    a.read = read_then_race  # type: ignore[method-assign]
    retired, _ = a.retire_if_done()
    writer[0].join(5.0)
    assert retired
    assert [e["id"] for e in b.read().pending] == ["r1/end"]


def test_marking_many_late_rounds_checked_reads_the_spool_once(tmp_path: Path) -> None:
    """After a long outage (here 30 replayed rounds waiting for their checks) marking
    each checked must not re-read the whole file each time (100 rounds of 8 nodes took
    38 s before): at most two reads for the lot, and the file is retired at the end."""
    from netcheck.storage import Store
    from netcheck.storage.durable import Recorder

    store = Store(f"sqlite:///{tmp_path / 'netcheck.db'}")
    rec = Recorder(store, tmp_path / "spool.jsonl")
    entry = {"type": "round", "outcomes": [], "timings": {}, "status": None,
             "summary": {}, "finished_at": 1.0, "canary_ids": [], "spooled_at": 1.0,
             "reason": "x", "checks": True}  # fmt: skip
    for k in range(30):
        rec.spool.append({**entry, "id": f"r{k}/end", "round_id": f"r{k}"})
        rec.spool.mark_replayed(f"r{k}/end")
    late = rec.unchecked()
    assert len(late) == 30
    reads = 0
    real_read = rec.spool.read

    def counted() -> SpoolContents:
        nonlocal reads
        reads += 1
        return real_read()

    rec.spool.read = counted  # type: ignore[method-assign]
    for r in late:
        rec.mark_checked(r.entry_id)
    assert reads <= 2
    assert not rec.spool.path.exists()
    store.close()


def test_a_round_entry_of_another_shape_fails_its_replay_not_the_replayer(tmp_path: Path) -> None:
    """A line with a good checksum but a round entry lacking ``outcomes`` (hand-edited,
    another version) fails its replay, naming the field; one with a verdict that does not exist fails its own
    replay; the good entry after them is still replayed, and ``replay`` raises nothing
    (it ran at start-up and before every round write: a KeyError there stopped both)."""
    from netcheck.records import RoundPlan
    from netcheck.storage import Store
    from netcheck.storage.durable import Recorder

    store = Store(f"sqlite:///{tmp_path / 'netcheck.db'}")
    for rid in ("r1", "r2", "r3"):
        store.record_plan(RoundPlan(rid, "p", 2, 1, (), ()), 1.0)
    rec = Recorder(store, tmp_path / "spool.jsonl")
    entry = {"type": "round", "outcomes": [], "timings": {}, "status": "complete",
             "summary": {}, "finished_at": 1.0, "canary_ids": [], "spooled_at": 1.0,
             "reason": "x"}  # fmt: skip
    broken = {**entry, "id": "r1/end", "round_id": "r1"}
    del broken["outcomes"]
    rec.spool.append(broken)
    bogus = {"node_key": "n", "verdict": "bogus", "reason": "", "elapsed_s": 1.0,
             "canaries_checked": 0, "canaries_matched": 0}  # fmt: skip
    rec.spool.append({**entry, "id": "r2/end", "round_id": "r2", "outcomes": [bogus]})
    rec.spool.append({**entry, "id": "r3/end", "round_id": "r3"})
    assert set(rec.pending()) == {"r2", "r3"}
    report = rec.replay()
    assert report.replayed == ["r3/end"] and sorted(report.failed) == ["r1/end", "r2/end"]
    assert report.failed["r1/end"] == "field outcomes missing"
    store.close()
