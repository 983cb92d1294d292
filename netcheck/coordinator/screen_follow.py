"""``netcheck screen run`` following its coordinator job: start it, show its progress
(a bar for the screening rounds with an ETA, then one for the confirmation: rounds so
far, suspect groups under test and settled; lines instead off a terminal), cancel it on
Ctrl-C. The job's fields are in docs/admin-api.md (``/admin/screening/jobs``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from netcheck.admin_client import admin_request
from netcheck.analysis.detector_config import DetectorConfig
from netcheck.analysis.schedule import pair_coverage, rounds_for_coverage
from netcheck.config import CoordinatorConfig
from netcheck.coordinator.jobs import SHUTDOWN_ERROR


def run_job(config_path: Path, body: dict[str, Any], held: dict[str, Any]) -> Any:
    """Start a screening job on the coordinator named by ``config_path`` and follow it
    to its end (``held`` receives ``job_id`` and ``names`` as soon as known).

    Raises:
        AdminUnreachable: the coordinator stopped answering (during the job: named,
            :func:`lost_job`).
        RunStopped: the job is gone from a coordinator that restarted between two polls
            (exit 11).
    """
    from netcheck.admin_client import AdminNotFound, AdminUnreachable, RunStopped, with_start_hint
    from netcheck.config import load_coordinator_config

    cfg = load_coordinator_config(config_path)
    try:
        return asyncio.run(_follow(cfg, body, held))
    except AdminNotFound as exc:  # the coordinator restarted between two polls
        if "job_id" not in held:
            raise
        raise RunStopped(f"{lost_job(held)} ({exc})") from None
    except AdminUnreachable as exc:
        hinted = with_start_hint(exc, config_path, cfg)
        if "job_id" not in held:
            raise hinted from exc.__cause__
        raise AdminUnreachable(f"{lost_job(held)}: {hinted}") from exc.__cause__


def lost_job(held: Mapping[str, Any]) -> str:
    """What ``screen run`` says when its coordinator stops answering during the job in
    ``held`` (``job_id``, and ``rounds_done``/``rounds_total`` once polled): the job is
    gone if the coordinator stopped (jobs live in its memory), the rounds stored so far
    are kept."""
    done = ""
    if "rounds_done" in held:
        done = f" after {held['rounds_done']} of {held['rounds_total']} rounds"
    return (f"lost the coordinator during screening job {held['job_id']}{done}: if it "
            "stopped, the job is gone (jobs live in its memory; the rounds stored so far "
            "are kept, a round in flight is marked aborted at its next start) and no "
            "analysis ran; run `screen run` again once it is back")  # fmt: skip


#: Signals that end ``screen run`` the way Ctrl-C does (its job cancelled on the
#: coordinator): a closed terminal or SSH session (SIGHUP), ``kill``, ``timeout`` or a
#: service manager (SIGTERM). Before, they ended the client at once and its job ran on,
#: unseen, spending canaries, with the next ``screen run`` waiting behind it.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Within the block, :data:`STOP_SIGNALS` raise ``KeyboardInterrupt`` as SIGINT does
    (so the caller's Ctrl-C path cancels the job); the previous handlers after it. A
    no-op off the main thread (signal handlers can only be set there)."""
    try:
        before = {sig: signal.signal(sig, signal.default_int_handler) for sig in STOP_SIGNALS}
    except ValueError:  # not the main thread (a test runner's worker thread)
        yield
        return
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def cancel_job(config_path: Path, held: dict[str, Any]) -> Any:
    """Cancel the job in ``held`` and wait until it has stopped."""
    from netcheck.config import load_coordinator_config

    return asyncio.run(_cancel(load_coordinator_config(config_path), held))


async def _names(cfg: CoordinatorConfig) -> dict[str, str]:
    data = await admin_request(cfg, "GET", "/admin/nodes", timeout_s=30)
    out = {}
    for n in data.get("known", []):
        name = n.get("display_name") or n.get("name")
        if name:
            out[n["node_key"]] = name
    return out


async def _follow(cfg: CoordinatorConfig, body: dict[str, Any], held: dict[str, Any]) -> Any:
    """Start a screening job, show its progress until it ends; returns the final job."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    job = await admin_request(cfg, "POST", "/admin/screening/jobs", body, timeout_s=30)
    held["job_id"] = job["job_id"]
    held["names"] = await _names(cfg)
    err = Console(stderr=True)
    path = f"/admin/screening/jobs/{job['job_id']}"
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("rounds  {task.fields[eta]}"))  # fmt: skip
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(f"screening {job['profile']}", total=job["rounds_total"], eta="ETA -")
        confirm_task = None  # a second bar once confirmation rounds run (no total: no ETA)
        shown: tuple[Any, ...] = ()
        said_at, after_t0 = 0.0, None
        while job["state"] in ("running", "cancelling"):
            await asyncio.sleep(POLL_S)
            job = await admin_request(cfg, "GET", path, timeout_s=30)
            held["rounds_done"], held["rounds_total"] = job["rounds_done"], job["rounds_total"]
            if after_t0 is None and _screening_done(job):
                after_t0 = time.monotonic()
            after_s = None if after_t0 is None else time.monotonic() - after_t0
            eta = eta_text(job, after_s)
            confirming = (job.get("confirmation") or {}).get("stage") in CONFIRM_STAGES
            if confirming and confirm_task is None:
                confirm_task = bar.add_task(f"confirmation {job['profile']}", total=None, eta="")
            if confirm_task is not None and job["state"] in ("running", "cancelling"):
                rounds = job["confirmation"]["rounds_done"]  # the bar counts them itself
                bar.update(confirm_task, completed=rounds, eta=confirm_text(job, after_s, False))
                eta = "done"
            bar.update(task, completed=job["rounds_done"], eta=eta)
            if err.is_terminal:
                continue
            # a log line instead: per screening round, when the confirmation's stage or
            # groups change, and every AFTER_LINE_S
            now, state = time.monotonic(), _line_state(job)
            if state != shown or (after_s and now - said_at >= AFTER_LINE_S):
                shown, said_at = state, now
                err.print(f"screening: {job['rounds_done']} of {job['rounds_total']} rounds, "
                          f"{eta_text(job, after_s)}", soft_wrap=True)  # fmt: skip
    return job


#: Confirmation stages of a job that show the confirmation bar (``analysis`` runs no round).
CONFIRM_STAGES = ("groups", "alone")


def _line_state(job: Mapping[str, Any]) -> tuple[Any, ...]:
    """What, when it changes, earns a new progress line off a terminal."""
    c = job.get("confirmation") or {}
    return (job["rounds_done"], c.get("stage"), c.get("groups_active"), c.get("groups_done"),
            job.get("waiting_for"))  # fmt: skip


#: Without a terminal, ``screen run`` repeats its progress line this often (seconds)
#: while the analysis and the confirmation rounds run (they report no progress).
AFTER_LINE_S = 30.0


def _screening_done(job: Mapping[str, Any]) -> bool:
    return bool(job["rounds_done"] == job["rounds_total"] and job["state"] == "running")


def eta_text(job: Mapping[str, Any], after_s: float | None = None) -> str:
    """What a screening job's progress line ends with: while it waits for an earlier
    job (``waiting_for``), that job and how to cancel it; ``ETA <s>`` until its last
    screening round ends; once they are all done, what the analysis and confirmation
    are doing (:func:`confirm_text`), for how long (``after_s``), and that they have no
    ETA (a suspect group's confirmation takes from a few rounds to hundreds); a job
    that has ended, its state."""
    if job["state"] not in ("running", "cancelling"):
        return str(job["state"])
    if job.get("waiting_for"):
        other = job["waiting_for"]
        return (f"waiting for screening job {other} to end (one screening at a time; "
                f"DELETE /admin/screening/jobs/{other} cancels it)")  # fmt: skip
    if _screening_done(job):
        return confirm_text(job, after_s)
    return "ETA -" if job["eta_s"] is None else f"ETA {job['eta_s']:.0f} s"


def confirm_text(
    job: Mapping[str, Any], after_s: float | None = None, with_rounds: bool = True
) -> str:
    """The analysis and confirmation part of a job's progress, from its ``confirmation``
    (docs/admin-api.md): the stage, confirmation rounds run so far in this job (unless
    ``with_rounds`` is False: a bar shows them), suspect groups under test and settled;
    a coordinator that does not report it (or before the analysis starts) gets the
    general line."""
    took = "" if after_s is None else f"; {after_s:.0f} s so far"
    c = job.get("confirmation") or {}
    stage = c.get("stage")
    if stage is None:
        return f"analysis and confirmation rounds running (no ETA{took})"
    if stage == "analysis":
        return f"analysis running (no ETA{took})"
    n = int(c["rounds_done"])
    rounds = f"{n} confirmation round{'' if n == 1 else 's'} so far; " if with_rounds else ""
    total, done = int(c["groups_total"]), int(c["groups_done"])
    if stage == "groups":
        return (f"{rounds}suspect groups: {c['groups_active']} under test, {done} of {total} "
                f"settled (no ETA{took})")  # fmt: skip
    groups = f"{done} of {total} suspect groups settled; " if total else ""
    return f"{rounds}{groups}slow nodes confirmed alone (no ETA{took})"


async def _cancel(cfg: CoordinatorConfig, held: dict[str, Any]) -> Any:
    """Cancel the job on the coordinator and wait (at most :data:`CANCEL_WAIT_S`) until it
    has stopped; returns the job as last seen: still in state ``cancelling`` when the wait
    ran out (its round in flight has not ended; the coordinator still stops it), which
    the caller reports (:func:`still_cancelling`) instead of raising ``TimeoutError``."""
    path = f"/admin/screening/jobs/{held['job_id']}"
    job = await admin_request(cfg, "DELETE", path, timeout_s=30)
    give_up = time.monotonic() + CANCEL_WAIT_S
    while job.get("state") == "cancelling" and time.monotonic() < give_up:
        await asyncio.sleep(POLL_S)
        job = await admin_request(cfg, "GET", path, timeout_s=30)
    return job


def still_cancelling(job: Mapping[str, Any]) -> str:
    """The sentence for a job that a Ctrl-C asked to cancel and that was still in state
    ``cancelling`` when ``screen run`` stopped waiting (:data:`CANCEL_WAIT_S`); "" for a
    job that stopped."""
    if job.get("state") != "cancelling":
        return ""
    job_id = job.get("job_id", "?")
    return (f"screening job {job_id} is still cancelling on the coordinator after "
            f"{CANCEL_WAIT_S:.0f} s (its round in flight has not ended); the coordinator "
            f"stops it when that round ends: GET /admin/screening/jobs/{job_id} shows its "
            "state")  # fmt: skip


#: Seconds between progress polls; the most a cancel waits for the round in flight.
POLL_S = 0.5
CANCEL_WAIT_S = 600.0


#: A report's ``halted`` at a shutdown (:data:`netcheck.coordinator.confirm_batches.SHUTDOWN`,
#: not imported: the client does not load the coordinator's round code).
SHUTDOWN_HALT = "coordinator shutdown"


def ended_unjudged(job: Mapping[str, Any]) -> str:
    """Why a screening job that has ended (``GET /admin/screening/jobs/{job_id}``) did
    not end with its judgement, as one sentence for the operator; "" when it did (state
    ``done`` with a report that is not ``cancelled``). A ``cancelled`` job was cancelled
    by another client (``DELETE /admin/screening/jobs/{job_id}``: a second terminal, a
    script) or stopped by the coordinator's shutdown (its ``error``, or the report's
    ``halted``); any other state but ``failed`` (reported by the caller with its
    ``error``) is named as it is. Used by ``screen run`` to exit 11 (``STOPPED``)."""
    state = str(job.get("state"))
    report = job.get("report") or {}
    if state == "done" and job.get("report") is not None and not report.get("cancelled"):
        return ""
    where = f"screening job {job.get('job_id', '?')} of profile {job.get('profile', '?')}"
    done = f"after {job.get('rounds_done', '?')} of {job.get('rounds_total', '?')} screening rounds"
    if state not in ("cancelled", "done"):
        return (f"{where} ended in state {state!r} {done}, not a completed run: its "
                "analysis and confirmation were not judged")  # fmt: skip
    halted = str(report.get("halted") or "")
    if job.get("error") == SHUTDOWN_ERROR or halted == SHUTDOWN_HALT:
        by = "was stopped by the coordinator's shutdown"
    else:
        by = ("was cancelled on the coordinator by another client (DELETE "
              "/admin/screening/jobs/ID: another terminal or a script)")  # fmt: skip
    if halted:
        what = ("during its confirmation: the running confirmations stopped, not judged (no "
                "cleared record; their rounds count toward the next attempt)")  # fmt: skip
    elif report.get("analysis") is None:
        what = f"{done}: no analysis, no confirmation"
    else:
        what = done
    return f"{where} {by} {what}; run `screen run` again for a judgement"


#: Pair coverage below which the analysis line says that more rounds are needed.
COVERAGE_TARGET = 0.95


def analysis_line(analysis: Mapping[str, Any]) -> str:
    """One plain line about a screening analysis (``report["analysis"]``): its size, what
    it found, and the level each node pair was tested at, with where that number comes
    from. With fewer than two nodes there is no pair to test, and it says so. With too
    few screening rounds for two identities on one card to be linked at all
    (:func:`~netcheck.analysis.schedule.pair_coverage` below ``COVERAGE_TARGET``), it
    says how many are needed."""
    n, rounds = int(analysis["n_nodes"]), int(analysis["n_rounds"])
    size = f"analysis over {n} node{'s' if n != 1 else ''} x {rounds} rounds"
    if n < 2:
        return f"{size}: no node pairs to compare (screening needs 2 or more nodes)"
    pairs = n * (n - 1)
    p_crit = float(analysis["p_crit"])
    line = (
        f"{size}: {len(analysis['edges'])} edges, {len(analysis['groups'])} suspect groups "
        f"(each ordered node pair tested at p < {p_crit:.3g}, i.e. {p_crit * pairs:.2g} "
        f"spread over {pairs} pairs; a suspect group is flagged only after confirmation "
        "rounds)"
    )
    q = float(analysis.get("load_probability", 0.5))  # absent: a coordinator before session 8
    det = DetectorConfig()  # the coordinator's detector
    min_rounds, one_way = det.mutual_min_rounds, det.mutual_one_way
    coverage = pair_coverage(rounds, min_rounds, q, one_way)
    if coverage < COVERAGE_TARGET:
        line += (
            f". Too few screening rounds to see every pair: two identities on one card can "
            f"be linked only with probability {coverage:.2f} after {rounds}; "
            f"{rounds_for_coverage(COVERAGE_TARGET, min_rounds, probability=q, either_direction=one_way)} screening "
            f"rounds give "
            f'{COVERAGE_TARGET:.2f} (docs/detection.md, "Rounds needed")'
        )
    return line
