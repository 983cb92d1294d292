"""A coordinator stopped dead in the middle of a confirmation run (docs/detection.md
"Confirmation" point 4), restarted on the same database.

Why in-process and not a SIGKILLed ``netcheck coordinator serve`` (as
test_coordinator_crash.py does for a screening round): a confirmation run starts only
after an analysis finds a suspect group, which needs nodes that slow each other when
loaded together; the node hosts a real process test can start
(``python -m netcheck.lab.load nodes``) have a fixed service time and never form one,
and screening enough rounds for an analysis would take minutes. So the run is driven
directly (``confirm_groups``, as the analysis does) and the "kill" is the task
cancelled while a confirmation round is in flight (its plan, schedule and context
stored, its nodes computing, its verdicts not yet), after several confirmation rounds
were stored; the coordinator is then dropped and a new one opens the same SQLite file
and starts as ``serve`` does (``Coordinator.recover``). Everything a SIGKILL could
leave is left: SQLite commits each write atomically, so a kill can only stop the run
between writes, which is where a cancellation stops it too (the in-flight round is not
finished by the cancellation: run_round has no handler that would write it).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.analysis.confirm_run import next_attempt, prior_attempts
from netcheck.analysis.detector_config import DetectorConfig, SuspectGroup
from netcheck.analysis.screening import analyse
from netcheck.config import DeadlineParams
from netcheck.coordinator.confirm_batches import confirm_groups
from netcheck.coordinator.group_flags import shared_flags, started_runs
from netcheck.keys import public_key_text
from netcheck.lab.emulation import EmulatedGPU, EmulatedWorker
from netcheck.lab.testing import (
    FAKE_FINGERPRINT,
    CanaryAnswering,
    RunningCoordinator,
    canary_store,
    running_coordinator,
    small_profile,
)
from netcheck.records import FlagKind, StoredRounds
from netcheck.storage import Store

T = 8
PROFILE = small_profile(
    "kill", prompt_len=16, max_new_tokens=T, deadline=DeadlineParams(t_ref_s=1.0),
    dispatch_timeout_s=5.0, result_timeout_s=5.0,
)  # fmt: skip
FP = FAKE_FINGERPRINT
SHARED = str(FlagKind.SHARED_BACKEND)


async def honest_pair(rc: RunningCoordinator, ids: list[Ed25519PrivateKey]) -> SuspectGroup:
    """Two honest nodes (a 0.1 s EMULATED GPU each), connected; their pair as a suspect
    group; confirmation in 3-cycle blocks up to 6 cycles."""
    for i, key in enumerate(ids):
        worker = EmulatedWorker(CanaryAnswering(FP, T), EmulatedGPU(0.1))
        rc.start(rc.node(worker, PROFILE.name, key, label=f"n{i}"))
    await rc.wait_connected(len(ids))
    screening = rc.coord.screening
    screening.config = rc.coord.config.model_copy(update={"confirm_cycles": 3,
                                                          "confirm_max_cycles": 6})  # fmt: skip
    return SuspectGroup(tuple(public_key_text(k) for k in ids), ())


def stored_state(store: Store) -> dict[str, Any]:
    """Every round (status) with its verdict and result rows (the stored evidence)."""
    return {
        r["round_id"]: (
            r["status"],
            store.round_verdicts(r["round_id"]),
            [
                store.result_row(r["round_id"], v["node_key"])
                for v in store.round_verdicts(r["round_id"])
            ],
        )  # fmt: skip
        for r in store.list_rounds(10_000)
    }


def runs_of(contexts: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """(batch, attempt) of every run named by stored confirmation contexts."""
    return {(c["batch"], e["attempt"]) for c in contexts if "batch" in c for e in c["runs"]}


async def test_coordinator_killed_mid_confirmation_round_then_restarted(tmp_path: Path) -> None:
    """Killed in a confirmation round after 3+ rounds of the run were stored: after the
    restart every round stored before the kill reads back unchanged (status, verdicts,
    receipts), the in-flight round is ``aborted`` with no verdict, the database passes
    SQLite's integrity check, no flag was stored by the cut run; the pair's next
    confirmation is attempt 2 (attempt 1 not reused) and pools the cut run's stored
    rounds (not the aborted one), its one ``cleared``
    record is the pair's only shared-backend flag, and the one after is attempt 3."""
    db = tmp_path / "netcheck.db"
    ids = [Ed25519PrivateKey.generate() for _ in range(2)]
    empty = StoredRounds((), {}, {}, ())
    analysis = analyse(empty, 1.0, DetectorConfig())
    async with running_coordinator(
        tmp_path, [PROFILE], store=canary_store(db, PROFILE, FP, 2000)
    ) as rc:
        group = await honest_pair(rc, ids)
        store, fs = rc.coord.store, rc.coord.screening.flags
        task = asyncio.create_task(confirm_groups(rc.coord.screening, PROFILE, [group], empty,
                                                  analysis, batching=True))  # fmt: skip
        async with asyncio.timeout(60):
            while True:  # 3+ rounds complete and the next one in flight
                rows = store.list_rounds(100)
                done = [r for r in rows if r["status"] == "complete"]
                if len(done) >= 3 and rows[0]["status"] == "planned":
                    break
                await asyncio.sleep(0.005)
        task.cancel()  # the kill: between two writes, the in-flight round left `planned`
        with contextlib.suppress(asyncio.CancelledError):
            await task
        in_flight = rows[0]["round_id"]
        before = stored_state(store)
        assert before[in_flight][0] == "planned"
        cut_runs = runs_of(fs.round_contexts(PROFILE.name, ["confirmation"]))
        assert len(cut_runs) == 1 and next(iter(cut_runs))[1] == 1
        assert fs.list_flags(kind=SHARED, limit=None) == []  # no flag, no record: not ended

    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    async with running_coordinator(tmp_path, [PROFILE], store=Store(f"sqlite:///{db}")) as rc:
        assert await rc.coord.recover() == 1  # as `serve` starts: the cut round aborted
        store, fs = rc.coord.store, rc.coord.screening.flags
        after = stored_state(store)
        assert after[in_flight][0] == "aborted" and after[in_flight][1] == []
        assert {k: v for k, v in after.items() if k != in_flight} == {
            k: v for k, v in before.items() if k != in_flight
        }
        members = list(group.members)
        assert next_attempt(members, shared_flags(fs, PROFILE.name, None),
                            started_runs(fs, PROFILE.name, members)) == 2  # fmt: skip

        group = await honest_pair(rc, ids)
        (res,) = await confirm_groups(rc.coord.screening, PROFILE, [group], empty, analysis,
                                      batching=True)  # fmt: skip
        assert res.run is not None and res.run.verdict == "cleared"
        assert res.run.attempt == 2 and res.as_dict()["attempt"] == 2
        pooled = {o.round_id for o in res.run.judged} & set(before)
        assert pooled and in_flight not in pooled  # the cut run's stored rounds count
        runs = runs_of(fs.round_contexts(PROFILE.name, ["confirmation"]))
        (new_run,) = runs - cut_runs
        assert new_run[1] == 2  # (the batch id names the analysis: the same here)
        (record,) = fs.list_flags(kind=SHARED, limit=None)  # one record, no duplicate
        assert str(record.status) == "cleared" and sorted(record.node_keys) == sorted(members)
        earlier = shared_flags(fs, PROFILE.name, None)
        assert prior_attempts(members, earlier) == 1
        assert next_attempt(members, earlier, started_runs(fs, PROFILE.name, members)) == 3
        for rid, (status, verdicts, _) in stored_state(store).items():
            if rid not in before:  # the new run's rounds: complete, loaded nodes judged
                assert status == "complete" and verdicts, rid
