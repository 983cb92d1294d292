"""``netcheck screen run`` as a coordinator job: progress, whole node names in the
output, and Ctrl-C cancelling the run on the coordinator (real loopback websockets,
made-up-token nodes, the CLI in a thread and as a real process)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner
from test_pool_surfaces import write_config
from test_screening_live import FP, PROFILE, T, _join, _store

from netcheck.cli import main
from netcheck.exitcodes import Exit
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import running_coordinator
from netcheck.storage import Store


async def test_screen_run_shows_progress_and_whole_keys(tmp_path: Path) -> None:
    """A 4-round run prints a progress line per round and every node key in full.
    On a loaded machine the analysis after the 4 rounds can nominate groups of these
    made-up nodes; confirmation is held to its shortest (3 cycles) so that the pool
    covers every group: at the defaults a confirmation of 775 rounds spent it and the
    next group ended the run with exit 8 (session 17's CI, under load)."""
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path, 2000)) as rc:
        short = {"confirm_cycles": 3, "confirm_max_cycles": 3}
        rc.coord.screening.config = rc.coord.config.model_copy(update=short)
        keys = await _join(rc, {f"n{i}": MadeUpWorker(FP, T) for i in range(3)})
        cfg = write_config(tmp_path, rc).read_text().replace('"pool"', f'"{PROFILE.name}"')
        (tmp_path / "coordinator.toml").write_text(cfg)
        flag = rc.coord.screening.flags.add_flag(
            "relay", "pending", PROFILE.name, sorted(keys.values()), 1.0, 0.5, {}
        )
        result = await asyncio.to_thread(
            CliRunner().invoke, main,
            ["screen", "run", "--config", str(tmp_path / "coordinator.toml"), "--rounds", "4",
             "--override-capacity", "test: emulated nodes"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "screening: 4 of 4 rounds" in result.stderr
        listed = await asyncio.to_thread(
            CliRunner().invoke, main,
            ["flags", "list", "--config", str(tmp_path / "coordinator.toml")],
        )  # fmt: skip
    for key in keys.values():
        assert key in listed.output  # whole key, not swallowed as markup nor cut
    assert f"{flag}" in listed.output


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["INT", "TERM", "HUP"]
)
async def test_ctrl_c_cancels_the_run_on_the_coordinator(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGINT to `netcheck screen run` stops the coordinator's job: exit 130, job
    cancelled after a few of its 500 rounds, and no further round starts. So do SIGTERM
    (`kill`, `timeout`) and SIGHUP (the terminal or SSH session closed); before, they
    ended the client at once and its job ran on unseen, spending canaries, with the next
    `screen run` waiting behind it at "0 of N rounds"."""
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path, 2000)) as rc:
        await _join(rc, {f"n{i}": MadeUpWorker(FP, T) for i in range(2)})
        cfg = write_config(tmp_path, rc).read_text().replace('"pool"', f'"{PROFILE.name}"')
        (tmp_path / "coordinator.toml").write_text(cfg)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "netcheck", "screen", "run", "--config",
            str(tmp_path / "coordinator.toml"), "--rounds", "500", "--override-capacity", "test",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        jobs = rc.coord.screening  # the job registry lives in the admin app
        async with asyncio.timeout(60):
            while True:
                stored = await asyncio.to_thread(rc.coord.store.list_rounds, 5)
                if stored:
                    break
                await asyncio.sleep(0.1)
        proc.send_signal(sig)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == Exit.INTERRUPTED, err.decode()
        assert b"cancelled on the coordinator" in err
        n_rounds = len(await asyncio.to_thread(rc.coord.store.list_rounds, 1000))
        await asyncio.sleep(1.0)
        assert len(await asyncio.to_thread(rc.coord.store.list_rounds, 1000)) == n_rounds
        assert n_rounds < 500
        assert not jobs.lock.locked()  # the screening lock is free again


async def test_job_status_carries_the_confirmation_progress() -> None:
    """The job hands its runner a ConfirmProgress and reports it in its status."""
    from netcheck.coordinator.jobs import ConfirmProgress, ScreeningJobs

    async def runner(profile: str, n: int, progress: object, cancel: asyncio.Event,
                     confirming: ConfirmProgress) -> dict[str, object]:  # fmt: skip
        confirming.stage, confirming.rounds_done, confirming.groups_total = "groups", 7, 2
        await asyncio.sleep(0.2)
        return {}

    jobs = ScreeningJobs(runner)
    job = jobs.start("p", 4)
    await asyncio.sleep(0.1)
    status = job.as_dict()["confirmation"]
    assert (status["stage"], status["rounds_done"], status["groups_total"]) == ("groups", 7, 2)
    await jobs.close()


async def test_shutdown_ends_a_screening_job_round_in_flight_as_aborted(tmp_path: Path) -> None:
    """The coordinator stops (its app's cleanup, as SIGTERM runs it) while a screening
    job's round is storing its plan (a slow database: the write takes 1 s). Before,
    the cleanup cancelled the job's task at once: the write still committed in its
    thread, nothing ended the round, and it stayed ``planned`` until the next start
    marked it aborted. Now the cleanup lets the job end (as the timer's round does): the
    round, whose nodes are gone, is stored ``aborted`` (no verdicts) before the process
    would exit."""
    db = tmp_path / "netcheck.db"
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        await _join(rc, {f"n{i}": MadeUpWorker(FP, T) for i in range(2)})
        screening = rc.coord.screening  # every round full: each round loads both nodes
        screening.config = screening.config.model_copy(update={"screening_full_every": 1})
        recorder = rc.coord.recorder
        real_record_plan = recorder.record_plan
        loop = asyncio.get_running_loop()
        writing = asyncio.Event()

        def slow_record_plan(plan: Any, started_at: float) -> None:
            loop.call_soon_threadsafe(writing.set)
            time.sleep(1.0)  # the database is slow: the write is in flight at shutdown
            real_record_plan(plan, started_at)

        recorder.record_plan = slow_record_plan  # type: ignore[method-assign]
        url = f"http://127.0.0.1:{rc.port}/admin/screening/jobs"
        auth = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        async with (
            aiohttp.ClientSession(headers=auth) as http,
            http.post(url, json={"rounds": 3}) as resp,
        ):
            assert resp.status == 202, await resp.text()
        await asyncio.wait_for(writing.wait(), 15.0)
        # leaving the block: the runner's cleanup (shutdown, then cleanup), as `serve`
    time.sleep(1.5)  # a write left running in its thread has committed by now
    store = Store(f"sqlite:///{db}")
    try:
        rounds = store.list_rounds(10)
        assert [r["status"] for r in rounds] == ["aborted"], rounds
        assert store.round_verdicts(rounds[0]["round_id"]) == []
    finally:
        store.close()


async def test_close_waits_for_a_job_to_stop_and_cancels_it_only_after_the_grace() -> None:
    """``ScreeningJobs.close`` (the admin app's cleanup) sets every job's cancel event
    and waits: a job that stops within the grace ends ``cancelled`` with its report (its
    round in flight was stored); one that does not is cancelled after it."""
    from netcheck.coordinator.jobs import ConfirmProgress, ScreeningJobs

    async def honours(profile: str, n: int, progress: Any, cancel: asyncio.Event,
                      confirming: ConfirmProgress) -> dict[str, object]:  # fmt: skip
        await cancel.wait()
        await asyncio.sleep(0.3)  # the round in flight ends (stored aborted)
        return {"cancelled": True, "rounds": []}

    async def ignores(profile: str, n: int, progress: Any, cancel: asyncio.Event,
                      confirming: ConfirmProgress) -> dict[str, object]:  # fmt: skip
        await asyncio.sleep(60)
        return {}

    jobs = ScreeningJobs(honours)
    polite, stuck = jobs.start("p", 4), jobs.start("p", 4, ignores)
    await asyncio.sleep(0.05)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await jobs.close(grace_s=1.0)
    assert 0.9 < loop.time() - t0 < 5.0  # waited the grace for the stuck one
    assert (polite.state, polite.report) == ("cancelled", {"cancelled": True, "rounds": []})
    assert stuck.state == "cancelled" and stuck.error == "cancelled at coordinator shutdown"
    assert stuck.task is not None and stuck.task.cancelled()


async def test_a_job_waiting_behind_another_says_which_and_how_to_cancel_it() -> None:
    """One screening runs at a time: a second job, before its first round, names the
    job it waits for (``waiting_for``) and ``screen run``'s line says so with the
    request that cancels it (before: "0 of N rounds, ETA -" for as long as the other
    ran, e.g. a job whose client was killed)."""
    from netcheck.coordinator.jobs import ScreeningJobs
    from netcheck.coordinator.screen_follow import eta_text

    lock = asyncio.Lock()

    async def runner(profile: str, n: int, progress: Any, cancel: asyncio.Event,
                     confirming: Any) -> dict[str, Any]:  # fmt: skip
        async with lock:  # as Screening.run: one at a time
            for i in range(n):
                if cancel.is_set():
                    return {"cancelled": True, "rounds": []}
                await asyncio.sleep(0.05)
                progress(i + 1, n)
        return {"rounds": []}

    jobs = ScreeningJobs(runner)
    first = jobs.start("p", 1000)
    second = jobs.start("p", 2)
    await asyncio.sleep(0.2)
    assert jobs.view(first)["waiting_for"] is None and first.rounds_done > 0
    view = jobs.view(second)
    assert view["waiting_for"] == first.job_id
    line = eta_text(view)
    assert f"waiting for screening job {first.job_id} to end" in line
    assert f"DELETE /admin/screening/jobs/{first.job_id}" in line
    jobs.cancel(first.job_id)
    assert second.task is not None
    await asyncio.wait_for(second.task, 5)
    assert jobs.view(second)["waiting_for"] is None and second.state == "done"
    assert "waiting" not in eta_text(jobs.view(second))
