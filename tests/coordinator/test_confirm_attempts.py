"""Error spending across confirmation attempts in the coordinator: every attempt of a
group (or a node's alone test) is counted from the flag table, whatever other profiles
store and however a run's flags merge, and from the stored rounds of runs cut short
(a coordinator restart); no attempt is spent on a node that left before its group
started (docs/detection.md "Confirmation", "Confirmation alone")."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import insert

from netcheck.analysis.alone import AloneConfig
from netcheck.analysis.confirm import ConfirmationObservation
from netcheck.analysis.confirm_run import ConfirmationRun, next_attempt, prior_attempts
from netcheck.analysis.detector_config import DetectorConfig, SuspectGroup
from netcheck.analysis.screening import analyse
from netcheck.analysis.slowness import SLOW, NodeSlowness, SlownessReport
from netcheck.config import DeadlineParams
from netcheck.coordinator.alone import confirm_alone, slow_nodes
from netcheck.coordinator.confirm_batches import confirm_groups
from netcheck.coordinator.group_flags import shared_flags, started_runs
from netcheck.errors import RoundError
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.emulation import EmulatedGPU, EmulatedWorker
from netcheck.lab.testing import (
    FAKE_FINGERPRINT,
    CanaryAnswering,
    RunningCoordinator,
    canary_store,
    running_coordinator,
    small_profile,
)
from netcheck.records import FlagKind, FlagStatus, StoredRounds
from netcheck.storage import Store
from netcheck.storage.flags import FlagStore, flags

T = 8
PROFILE = small_profile(
    "test", prompt_len=16, max_new_tokens=T, deadline=DeadlineParams(t_ref_s=1.0),
    dispatch_timeout_s=5.0, result_timeout_s=5.0,
)  # fmt: skip
FP = FAKE_FINGERPRINT
SHARED = str(FlagKind.SHARED_BACKEND)


def _bulk_flags(store: FlagStore, kind: str, status: str, profile: str, n: int) -> None:
    """``n`` flags of another profile, newer than everything stored so far."""
    rows: list[dict[str, Any]] = [dict(kind=kind, status=status, profile=profile, node_keys=[f"x{i}", f"y{i}"],
                 created_at=time.time(), statistic=None, threshold=None, evidence={})
            for i in range(n)]  # fmt: skip
    with store.store._write("bulk flags") as conn:
        conn.execute(insert(flags), rows)


def _run_flagging_ab_of_abc() -> ConfirmationRun:
    """A finished confirmation of {a, b, c} in which a and b slow each other (x1.65)
    and c is independent: one flag {a, b}; the pairs (a, c), (b, c) were tested."""
    rng = np.random.default_rng(0)
    run = ConfirmationRun(("a", "b", "c"), cycles=4, max_cycles=8)
    n = 0
    while not run.done:
        block = []
        for load in run.next_block():
            n += 1
            slow = 0.5 if {"a", "b"} <= load else 0.0
            values = {m: (slow if m in "ab" else 0.0) + rng.normal(0.0, 0.01) for m in load}
            block.append(ConfirmationObservation(f"r{n}", frozenset(load), values))
        run.add(block)
    assert run.flags == [("a", "b")]
    return run


async def test_attempts_survive_newer_flags_of_other_profiles(tmp_path: Path) -> None:
    """A pair's earlier attempt still counts (and a confirmed slow flag still skips its
    node) after 10,000 newer flags of another profile: no fresh level from a window."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 10, answer=(1,) * T)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        screening = rc.coord.screening
        fs = screening.flags
        fs.add_flag(SHARED, "cleared", PROFILE.name, ["a", "b"], 0.5, 1e-3, {})
        fs.add_flag(SLOW, "confirmed", PROFILE.name, ["s"], 1e-9, 1e-3, {})
        _bulk_flags(fs, SHARED, "cleared", "other", 10_001)
        _bulk_flags(fs, SLOW, "confirmed", "other", 10_001)
        earlier = screening._shared_flags(PROFILE.name, None)
        assert prior_attempts(["a", "b"], earlier) == 1
        assert slow_nodes(fs, PROFILE.name) == {"s"}
        assert len(fs.list_flags(kind=SHARED, profile="other", limit=None)) == 10_001
        assert len(fs.list_flags(kind=SHARED, profile=PROFILE.name)) == 1


async def test_every_run_of_a_group_counts_as_an_attempt(tmp_path: Path) -> None:
    """A run that flags {a, b} of {a, b, c} also records the test of {a, b, c} (a
    ``cleared`` record naming the cleared pairs): the next confirmation of (a, c) is
    its 2nd attempt, and a second run of {a, b, c}, whose flag merges into the open
    {a, b} flag, still adds an attempt."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 10, answer=(1,) * T)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        screening = rc.coord.screening
        stored = StoredRounds((), {}, {}, ())
        analysis = analyse(stored, 1.0, DetectorConfig())
        group = SuspectGroup(("a", "b", "c"), ())
        run = _run_flagging_ab_of_abc()
        sched = {o.round_id: {m: m in o.loaded for m in "abc"} for o in run.judged}
        ids = screening._store_group_flags(PROFILE, group, stored, analysis, run, sched)
        got = [screening.flags.get_flag(i) for i in ids]
        assert [(str(f.status), list(f.node_keys)) for f in got if f is not None] == [
            ("confirmed", ["a", "b"]), ("cleared", ["a", "b", "c"])
        ]  # fmt: skip
        record = got[1]
        assert record is not None and record.evidence is not None
        assert record.evidence["cleared_pairs"] == [["a", "c"], ["b", "c"]]
        assert prior_attempts(["a", "c"], screening._shared_flags(PROFILE.name, None)) == 1
        before = prior_attempts(["a", "b", "c"], screening._shared_flags(PROFILE.name, None))
        again = screening._store_group_flags(PROFILE, group, stored, analysis, run, sched)
        assert again[0] == ids[0]  # merged into the open flag
        after = prior_attempts(["a", "b", "c"], screening._shared_flags(PROFILE.name, None))
        assert after == before + 1
        confirmed = screening.flags.list_flags(kind=SHARED, status=FlagStatus.CONFIRMED)
        assert [list(f.node_keys) for f in confirmed] == [["a", "b"]]


async def test_nominees_and_groups_that_left_get_no_rounds_and_no_attempt(tmp_path: Path) -> None:
    """A slowness nominee (here one the screening test rejected: no flag by itself) or
    a suspect-group member that is not connected gets no confirmation round and no
    record: an empty test would spend one of its attempts (a slow node could leave
    around analyses to shrink its level) and run empty rounds."""
    fast = PROFILE.model_copy(update={"deadline": DeadlineParams(t_ref_s=0.1)})
    store = canary_store(tmp_path / "netcheck.db", fast, FP, 50, answer=(1,) * T)
    async with running_coordinator(tmp_path, [fast], store=store) as rc:
        names = rc.start_named({"here": MadeUpWorker(FP, T)}, fast.name)
        await rc.wait_connected(1)
        here, gone = names["here"], "ed25519:" + "A" * 43
        screening = rc.coord.screening
        node = NodeSlowness(gone, tuple(f"s{i}" for i in range(10)), (1.5,) * 10, 10, 10,
                            1.5, 1e-3, 1e-4, True)  # fmt: skip
        report = SlownessReport(0.1, 1.25, 0.01, 1, 1e-4, 8, 1.0, True, (node,))
        before = len(rc.coord.store.list_rounds(100))
        assert await confirm_alone(rc.coord, screening.flags, fast, report, AloneConfig()) == []
        stored = StoredRounds((), {}, {}, ())
        with pytest.raises(RoundError, match="not connected"):
            await screening.confirm_group(fast, SuspectGroup((here, gone), ()), stored,
                                          analyse(stored, 1.0, DetectorConfig()))  # fmt: skip
        assert len(rc.coord.store.list_rounds(100)) == before
        assert screening.flags.list_flags(limit=None) == []


async def _honest_pair(rc: RunningCoordinator, ids: list[Ed25519PrivateKey]) -> SuspectGroup:
    """Two honest nodes (a 0.1 s EMULATED GPU each) with the identities ``ids``,
    connected; their pair as a suspect group; confirmation in 3-cycle blocks."""
    for i, key in enumerate(ids):
        worker = EmulatedWorker(CanaryAnswering(FP, T), EmulatedGPU(0.1))
        rc.start(rc.node(worker, PROFILE.name, key, label=f"n{i}"))
    await rc.wait_connected(len(ids))
    screening = rc.coord.screening
    screening.config = rc.coord.config.model_copy(update={"confirm_cycles": 3,
                                                          "confirm_max_cycles": 6})  # fmt: skip
    return SuspectGroup(tuple(public_key_text(k) for k in ids), ())


async def test_a_run_cut_short_by_a_restart_counts_as_an_attempt(tmp_path: Path) -> None:
    """The coordinator stops in the middle of a pair's confirmation (rounds stored, no
    flag, no record); after a restart the pair's next confirmation is its 2nd attempt,
    not a fresh 1st, and the one after it its 3rd (the finished run counted once,
    though it has both rounds and a record)."""
    db = tmp_path / "netcheck.db"
    ids = [Ed25519PrivateKey.generate() for _ in range(2)]
    empty = StoredRounds((), {}, {}, ())
    analysis = analyse(empty, 1.0, DetectorConfig())
    async with running_coordinator(
        tmp_path, [PROFILE], store=canary_store(db, PROFILE, FP, 2000)
    ) as rc:
        group = await _honest_pair(rc, ids)
        fs = rc.coord.screening.flags
        task = asyncio.create_task(confirm_groups(rc.coord.screening, PROFILE, [group], empty,
                                                  analysis, batching=True))  # fmt: skip
        async with asyncio.timeout(30):
            while len(fs.round_contexts(PROFILE.name, ["confirmation"])) < 3:
                await asyncio.sleep(0.02)
        task.cancel()  # the coordinator is stopped mid-run
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert fs.list_flags(kind=SHARED, limit=None) == []  # no flag, no record
    async with running_coordinator(tmp_path, [PROFILE], store=Store(f"sqlite:///{db}")) as rc:
        group = await _honest_pair(rc, ids)
        (res,) = await confirm_groups(rc.coord.screening, PROFILE, [group], empty, analysis,
                                      batching=True)  # fmt: skip
        assert res.run is not None and res.run.verdict == "cleared"
        assert res.run.attempt == 2 and res.as_dict()["attempt"] == 2
        fs = rc.coord.screening.flags
        members = list(group.members)
        earlier = shared_flags(fs, PROFILE.name, None)
        assert prior_attempts(members, earlier) == 1  # the record of the 2nd run only
        assert next_attempt(members, earlier, started_runs(fs, PROFILE.name, members)) == 3
