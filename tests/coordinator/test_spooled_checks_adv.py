"""Adversarial cases of the after-round checks of spooled rounds (docs/spool.md):
a check that raises a bug (not a storage error) for one replayed round must not keep
the coordinator from starting nor block the checks of the other rounds; a spool with
garbage, torn, duplicate and orphan-marker lines."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from test_spooled_round_checks import (
    PROFILE,
    A,
    B,
    locked,
    shared_answers,
    store_plan,
)

from netcheck.config import Profile
from netcheck.lab.testing import running_coordinator
from netcheck.records import NodeOutcome, NodeRecord, RoundPlan
from netcheck.storage import Store
from netcheck.storage.spool import Spool, encode_line


def buggy(seen: list[str], bad: str) -> Any:
    async def hook(p: Profile, plan: RoundPlan, o: Sequence[NodeOutcome],
                   r: Mapping[str, NodeRecord], *, strict: bool = False) -> list[int]:  # fmt: skip
        seen.append(plan.round_id)
        if plan.round_id == bad:
            raise KeyError("a bug in a check")
        return []

    return hook


async def test_a_check_that_raises_for_one_late_round_does_not_block_start_or_others(
    tmp_path: Path,
) -> None:
    """Two rounds spooled; at the next start the checks of the first raise a bug
    (KeyError). Start-up still completes, the second round is still checked, and the
    first stays unchecked (its checks are tried again, not lost)."""
    db = tmp_path / "netcheck.db"
    store = Store(f"sqlite:///{db}", busy_timeout_ms=50)
    kw: dict[str, Any] = {"store": store, "storage_retry_s": 0.2, "spool_replay_s": 600.0}
    async with running_coordinator(tmp_path, [PROFILE], **kw) as rc:
        for rid in ("r1", "r2"):
            store_plan(store, rid, [A, B])
        outcomes, records = shared_answers([A, B], ())
        with locked(db):
            for rid in ("r1", "r2"):
                how = await asyncio.to_thread(
                    rc.coord.recorder.end_round, rid, outcomes, records, status="complete",
                    checks=True,
                )  # fmt: skip
                assert how == "spooled"
    async with running_coordinator(tmp_path, [PROFILE], **kw) as rc:
        seen: list[str] = []
        rc.coord.round_hooks.after_round.append(buggy(seen, "r1"))
        assert await rc.coord.recover() == 0
        assert seen == ["r1", "r2"]
        assert [r.round_id for r in rc.coord.recorder.unchecked()] == ["r1"]
        seen.clear()
        await rc.coord._late_checks()  # tried again; still raising, still kept
        assert seen == ["r1"]
    store.close()


def test_spool_reads_garbage_torn_duplicate_and_orphan_lines(tmp_path: Path) -> None:
    """Garbage and a torn last line are bad lines; a ``checked``/``replayed`` marker of an
    id never spooled is harmless; a round entry appended twice (a write that landed
    although its fsync failed, then retried) is pending once and unchecked once."""
    path = tmp_path / "spool.jsonl"
    entry = {"type": "round", "id": "r1/end", "round_id": "r1", "outcomes": [],
             "timings": {}, "status": None, "summary": {}, "finished_at": 1.0,
             "canary_ids": [], "spooled_at": 1.0, "reason": "x", "checks": True}  # fmt: skip
    line = encode_line(entry)
    path.write_bytes(
        b"garbage\n" + line + line
        + encode_line({"type": "checked", "id": "nobody", "at": time.time()})
        + line[:20]
    )  # fmt: skip
    c = Spool(path).read()
    assert [n for n, _ in c.bad] == [1, 5]
    assert [e["id"] for e in c.pending] == ["r1/end"]
    path.write_bytes(line + line + encode_line({"type": "replayed", "id": "r1/end", "at": 1.0}))
    c = Spool(path).read()
    assert c.pending == [] and [e["id"] for e in c.unchecked] == ["r1/end"]
