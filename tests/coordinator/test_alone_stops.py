"""The alone stage of confirmation (netcheck.coordinator.alone) stopped unjudged, in a
live coordinator (real loopback websocket sessions, EMULATED service times): by a
screening job's cancel, as the contention stages stop since session 15 (no record, the
attempt not spent, its rounds pooled into the next attempt), and by a canary pool that
cannot cover its rounds (not started, or stopped at the first ``unchecked`` round).
Before session 16 a cancel did not reach this stage, and an empty pool still ran every
round of the window."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from test_screening_live import FP, PROFILE, Delayed, _join

from netcheck.analysis.alone import AloneConfig
from netcheck.analysis.slowness import NodeSlowness, SlownessReport
from netcheck.config import DeadlineParams
from netcheck.coordinator import alone, confirm_batches
from netcheck.coordinator.alone import confirm_alone, next_attempt
from netcheck.coordinator.confirm_batches import halted
from netcheck.coordinator.jobs import ConfirmProgress, ScreeningJobs
from netcheck.lab.testing import RunningCoordinator, canary_store, running_coordinator
from netcheck.records import RoundReport

FAST = PROFILE.model_copy(update={"deadline": DeadlineParams(t_ref_s=0.1)})
T = PROFILE.max_new_tokens


def _report(key: str) -> SlownessReport:
    """A slowness report nominating ``key`` (rejected: a ``slow`` flag needs the stage)."""
    node = NodeSlowness(key, tuple(f"s{i}" for i in range(10)), (1.5,) * 10, 10, 10, 1.5, 1e-3,
                        1e-4, True)  # fmt: skip
    return SlownessReport(0.1, 1.25, 0.01, 1, 1e-4, 8, 1.0, True, (node,))


def _alone_rounds(rc: RunningCoordinator) -> int:
    flags = rc.coord.screening.flags
    return len(flags.recent_rounds(FAST.name, ["confirmation"], 1000).round_ids)


def _slow_records(rc: RunningCoordinator) -> list[Any]:
    return rc.coord.screening.flags.list_flags(kind="slow", profile=FAST.name, limit=None)


def _cancel_after(rc: RunningCoordinator, n: int, cancel: asyncio.Event) -> None:
    """Set ``cancel`` once ``n`` confirmation rounds have finished."""
    seen: list[str] = []

    def observe(report: RoundReport) -> None:
        if report.kind == "confirmation":
            seen.append(report.round_id)
            if len(seen) >= n:
                cancel.set()

    rc.coord.round_hooks.finished.append(observe)


async def test_a_cancel_stops_the_alone_stage_unjudged_and_pools_its_rounds(
    tmp_path: Path,
) -> None:
    """Cancelled after 3 of its 8 alone rounds, the node's attempt stops there: no
    record, attempt 1 still next; the next analysis's attempt 1 runs the 5 rounds left
    and judges all 8 (before: the cancel was not read, 8 rounds and a record)."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 200, answer=(1,) * T)
    async with running_coordinator(tmp_path, [FAST], store=store) as rc:
        key = (await _join(rc, {"slow": Delayed(0.2)}))["slow"]
        screening = rc.coord.screening
        cfg, cancel, progress = AloneConfig(rounds=8), asyncio.Event(), ConfirmProgress()
        _cancel_after(rc, 3, cancel)
        ids = await confirm_alone(rc.coord, screening.flags, FAST, _report(key), cfg,
                                  progress=progress, halt=partial(halted, screening, cancel))  # fmt: skip
        cut = (ids, _alone_rounds(rc), progress.rounds_done, len(_slow_records(rc)))
        attempt = next_attempt(screening.flags, FAST.name, key)
        again = await confirm_alone(rc.coord, screening.flags, FAST, _report(key), cfg)
        after = _alone_rounds(rc)
        (record,) = [f for f in (screening.flags.get_flag(i) for i in again) if f]
    assert cut == ([], 3, 3, 0) and attempt == 1
    assert after == 8  # 5 more: the 3 rounds of the cut attempt are in its window
    assert record.evidence is not None
    assert (record.evidence["attempt"], record.evidence["n"]) == (1, 8)


async def test_a_job_cancelled_in_the_alone_stage_ends_cancelled_with_halted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A screening job whose slowness test nominates a node is cancelled during the
    node's alone rounds: the job ends ``cancelled``, its report ``halted`` (the cancel),
    and no ``slow`` record is stored (before: the stage ran on, stored its record, and
    the job ended ``done``)."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 200, answer=(1,) * T)
    async with running_coordinator(tmp_path, [FAST], store=store) as rc:
        key = (await _join(rc, {"slow": Delayed(0.2), "other": Delayed(0.0)}))["slow"]
        screening = rc.coord.screening
        screening.alone = AloneConfig(rounds=8)

        async def nominating(profile: Any, stored: Any) -> tuple[list[int], SlownessReport]:
            return [], _report(key)

        monkeypatch.setattr(screening, "_slowness", nominating)

        async def runner(profile: str, n: int, progress: Any, cancel: asyncio.Event,
                         confirming: ConfirmProgress) -> dict[str, Any]:  # fmt: skip
            return await screening.run(profile, n, progress=progress, cancel=cancel,
                                       confirming=confirming)  # fmt: skip

        jobs = ScreeningJobs(runner)
        job = jobs.start(FAST.name, 2)

        def observe(report: RoundReport) -> None:
            if report.kind == "confirmation" and report.schedule.get(key):
                jobs.cancel(job.job_id)

        rc.coord.round_hooks.finished.append(observe)
        assert job.task is not None
        await asyncio.wait_for(asyncio.shield(job.task), 60)
        records = _slow_records(rc)
        rounds = _alone_rounds(rc)
        await jobs.close()
    assert job.state == "cancelled", job.as_dict()
    assert job.report is not None and job.report["halted"] == confirm_batches.CANCELLED
    assert records == [] and rounds == 1


async def test_a_pool_that_cannot_cover_the_alone_rounds_runs_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """3 canaries for a window of 8 alone rounds: no round, no record, a WARNING naming
    the build command (before: 8 rounds, 5 of them ``unchecked``, and no record)."""
    caplog.set_level(logging.WARNING, logger="netcheck.screening")
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 3, answer=(1,) * T)
    async with running_coordinator(tmp_path, [FAST], store=store) as rc:
        key = (await _join(rc, {"slow": Delayed(0.2)}))["slow"]
        flags = rc.coord.screening.flags
        dry: list[dict[str, Any]] = []
        ids = await confirm_alone(rc.coord, flags, FAST, _report(key), AloneConfig(rounds=8),
                                  pool_short=dry)  # fmt: skip
        rounds, records = _alone_rounds(rc), _slow_records(rc)
    assert (ids, rounds, records) == ([], 0, [])
    text = " ".join(r.getMessage() for r in caplog.records)
    assert confirm_batches.POOL_SHORT in text and f"reference build --profile {FAST.name}" in text
    (entry,) = dry  # in the analysis report (alone_pool_short): screen run exits 8
    assert entry["node"] == key and entry["unchecked_rounds"] == 0
    assert confirm_batches.pool_short(entry["reason"]) and "not started" in entry["reason"]


async def test_an_unchecked_alone_round_stops_the_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the pool check passed (a pool that other rounds drain meanwhile), the round
    in which the node comes back ``unchecked`` (no canary: no job, no timing) is its
    last: 3 canaries, 4 rounds (before: 8), no record."""
    monkeypatch.setattr(alone, "pool_shortfall", lambda *a, **k: [], raising=False)
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 3, answer=(1,) * T)
    async with running_coordinator(tmp_path, [FAST], store=store) as rc:
        key = (await _join(rc, {"slow": Delayed(0.2)}))["slow"]
        flags = rc.coord.screening.flags
        dry: list[dict[str, Any]] = []
        ids = await confirm_alone(rc.coord, flags, FAST, _report(key), AloneConfig(rounds=8),
                                  pool_short=dry)  # fmt: skip
        rounds, records = _alone_rounds(rc), _slow_records(rc)
    assert (ids, rounds, records) == ([], 4, [])
    assert [(e["node"], e["unchecked_rounds"]) for e in dry] == [(key, 1)]
    assert "unchecked, no canary" in dry[0]["reason"]
