"""A confirmation cut by a coordinator shutdown or a screening job's cancel, in a live
coordinator (real loopback websocket sessions, EMULATED GPU service times): the run
stops "stopped, not judged" as a canary-pool stop does (docs/detection.md
"Confirmation"): no ``cleared`` record, its rounds count the attempt and are pooled
into the next, and the job ends ``cancelled``. Before, the shutdown closed the sessions,
the run stopped as if its members had left and, having had a look, stored a
``cleared`` record; the job ended ``done``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest
from test_confirm_pool import PROFILE, _confirm, _pair, _state

from netcheck.analysis.detector_config import SuspectGroup
from netcheck.coordinator import analysis_pass, confirm_batches
from netcheck.coordinator import jobs as jobs_module
from netcheck.coordinator.jobs import ConfirmProgress, ScreeningJobs
from netcheck.lab.testing import FAKE_FINGERPRINT, RunningCoordinator, canary_store
from netcheck.lab.testing import running_coordinator as live

FIRST_LOOK = 9  # rounds of the pair's first block (confirm_cycles 3)


async def _confirmation_rounds(rc: RunningCoordinator, at_least: int) -> None:
    """Wait until ``at_least`` confirmation rounds are stored with their results."""
    fs = rc.coord.screening.flags
    async with asyncio.timeout(60):
        while True:
            stored = await asyncio.to_thread(fs.recent_rounds, PROFILE.name, ["confirmation"], 1000)
            if len(stored.round_ids) >= at_least:
                return
            await asyncio.sleep(0.05)


def _pooled(rc: RunningCoordinator, a: str, b: str) -> int:
    """Observations the next attempt of (a, b) starts with (the earlier runs' rounds)."""
    return len(rc.coord.screening._prior_observations(PROFILE.name, [a, b], 0.65, {}))


async def test_a_shutdown_mid_confirmation_stores_no_cleared_record(tmp_path: Path) -> None:
    """The honest pair's run has judged its first look (9 rounds, not confirmed) and is
    in its second block when the coordinator shuts down (its ``on_shutdown``: the
    sessions close, the round in flight ends ``aborted``). The run stops "stopped, not
    judged": no flag, no record (before: a ``cleared`` record, as if its members had
    left); its rounds count the attempt (next attempt 2) and are pooled into it."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FAKE_FINGERPRINT, 60)
    async with live(tmp_path, [PROFILE], store=store) as rc:
        a, b = await _pair(rc)
        task = asyncio.create_task(_confirm(rc, a, b))
        await _confirmation_rounds(rc, FIRST_LOOK + 2)
        await rc.coord.on_shutdown(rc.runner.app)
        res = await asyncio.wait_for(task, 30)
        n_flags, n_rounds, attempt = _state(rc, a, b)
        pooled = _pooled(rc, a, b)
    assert res.run is None, res.as_dict()
    assert res.reason.startswith(confirm_batches.SHUTDOWN), res.reason
    assert confirm_batches.not_judged(res.reason)
    assert n_flags == 0  # no cleared record
    assert (attempt, n_rounds) == (2, pooled) and pooled > FIRST_LOOK


async def test_cancelling_a_job_mid_confirmation_ends_it_cancelled_unjudged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A screening job (``Screening.run``, as ``POST /admin/screening/jobs`` starts it)
    whose analysis nominates the honest pair is cancelled during the pair's second
    block: the confirmation stops before its next round, stores no record, the job ends
    ``cancelled`` with ``halted`` in its report (before: ran on, ``done``). The next
    attempt pools the cut run's rounds."""
    real = analysis_pass.analyse

    def nominating(*args: Any) -> Any:
        out = real(*args)
        group = SuspectGroup(tuple(sorted(pair)), ())
        return dataclasses.replace(out, detection=dataclasses.replace(out.detection,
                                                                      groups=(group,)))  # fmt: skip

    monkeypatch.setattr(analysis_pass, "analyse", nominating)
    caplog.set_level(logging.WARNING, logger="netcheck.screening")
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FAKE_FINGERPRINT, 80)
    async with live(tmp_path, [PROFILE], store=store) as rc:
        pair = await _pair(rc)
        screening = rc.coord.screening

        async def runner(profile: str, n: int, progress: Any, cancel: asyncio.Event,
                         confirming: ConfirmProgress) -> dict[str, Any]:  # fmt: skip
            return await screening.run(profile, n, progress=progress, cancel=cancel,
                                       confirming=confirming)  # fmt: skip

        jobs = ScreeningJobs(runner)
        job = jobs.start(PROFILE.name, 2)
        await _confirmation_rounds(rc, FIRST_LOOK + 2)
        jobs.cancel(job.job_id)
        assert job.task is not None
        await asyncio.wait_for(asyncio.shield(job.task), 30)
        n_flags, n_rounds, attempt = _state(rc, *pair)
        pooled = _pooled(rc, *pair)
        await jobs.close()
    assert job.state == "cancelled", job.as_dict()
    assert job.report is not None and job.report["cancelled"] is True
    assert job.report["halted"] == confirm_batches.CANCELLED
    (entry,) = job.report["confirmations"]
    assert entry["verdict"] == "not-run" and confirm_batches.not_judged(entry["reason"])
    assert n_flags == 0
    assert (attempt, n_rounds) == (2, pooled) and pooled > FIRST_LOOK
    assert any("stopped, not judged" in r.getMessage() for r in caplog.records)


async def test_close_gives_up_on_a_job_that_ignores_its_cancellation(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's task that swallows the cancellation after the grace: ``close`` waits
    :data:`~netcheck.coordinator.jobs.CANCEL_WAIT_S` more, logs an ERROR naming the job and returns (before: it waited
    for the task without a bound)."""
    release = asyncio.Event()

    async def stubborn(profile: str, n: int, progress: Any, cancel: asyncio.Event,
                       confirming: ConfirmProgress) -> dict[str, Any]:  # fmt: skip
        while not release.is_set():
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                continue  # a bug: swallows the cancellation
        return {}

    monkeypatch.setattr(jobs_module, "CANCEL_WAIT_S", 0.3, raising=False)
    jobs = ScreeningJobs(stubborn)
    job = jobs.start("p", 4)
    await asyncio.sleep(0.05)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    # (not wait_for: cancelling a close that awaits the stubborn task would hang too)
    closing = asyncio.create_task(jobs.close(grace_s=0.2))
    try:
        with caplog.at_level(logging.ERROR, logger="netcheck.admin"):
            await asyncio.wait({closing}, timeout=5.0)
        assert closing.done(), "close() still waits for the job's task"
        assert loop.time() - t0 < 2.0
        assert any(job.job_id in r.getMessage() and r.levelno == logging.ERROR
                   for r in caplog.records)  # fmt: skip
    finally:  # let the task end (the test's loop closes after)
        release.set()
        assert job.task is not None
        job.task.cancel()
        await asyncio.gather(job.task, closing, return_exceptions=True)
