"""Screening runs as coordinator-side jobs that report progress and can be cancelled.

``netcheck screen run`` starts one (``POST /admin/screening/jobs``), polls it
(``GET /admin/screening/jobs/{job_id}``) to show rounds done and an ETA, and cancels it
on Ctrl-C (``DELETE /admin/screening/jobs/{job_id}``): the round in flight finishes and
is stored, no further round starts, analysis and confirmation are skipped. The
blocking ``POST /admin/screening`` stays for scripts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from netcheck.errors import NetcheckError, StorageError

log = logging.getLogger("netcheck.admin")

#: Finished jobs kept for polling, newest last.
KEEP_FINISHED = 32
#: At shutdown, how long :meth:`ScreeningJobs.close` waits for a job's round in flight
#: to end as ``aborted`` before cancelling the job (seconds; as the screening timer's
#: grace, :data:`netcheck.coordinator.screening_timer.TIMER_STOP_GRACE_S`): its
#: sessions are closed by then, so it ends in well under a second unless the database
#: is down (then ``storage_retry_s``, 10 s by default, of retries before the spool).
STOP_GRACE_S = 30.0
#: After cancelling a job still running past :data:`STOP_GRACE_S`, how long
#: :meth:`ScreeningJobs.close` waits for its task to end (seconds); a task that does not
#: (a runner that swallowed the cancellation) is logged as an ERROR and left behind.
CANCEL_WAIT_S = 10.0
#: The ``error`` of a job cancelled at coordinator shutdown past :data:`STOP_GRACE_S`.
SHUTDOWN_ERROR = "cancelled at coordinator shutdown"


@dataclass
class ConfirmProgress:
    """How far the analysis and confirmation after a job's screening rounds have got
    (``confirmation`` in ``GET /admin/screening/jobs/{job_id}``), updated by
    :func:`~netcheck.coordinator.confirm_batches.confirm_groups` and
    :func:`~netcheck.coordinator.alone.confirm_alone` as they run.

    ``stage``: None before the analysis, then ``analysis``, ``groups`` (suspect groups
    confirmed in shared rounds), ``alone`` (slowness nominees loaded alone);
    ``rounds_done``: confirmation rounds run so far in this job (both stages);
    ``groups_total``: suspect groups the analysis found; ``groups_active``: those under
    test now; ``groups_done``: those settled (flagged, cleared or not run)."""

    stage: str | None = None
    rounds_done: int = 0
    groups_total: int = 0
    groups_active: int = 0
    groups_done: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Runs a screening: (profile, rounds, progress callback, cancel event, confirmation
#: progress) -> report.
Runner = Callable[
    [str, int, Callable[[int, int], None], asyncio.Event, ConfirmProgress],
    Awaitable[dict[str, Any]],
]


@dataclass
class ScreeningJob:
    """One screening run: ``state`` is ``running``, ``cancelling``, ``done``,
    ``cancelled`` or ``failed``; times are Unix seconds (``eta_s`` seconds from now)."""

    job_id: str
    profile: str
    rounds_total: int
    started_at: float = field(default_factory=time.time)
    rounds_done: int = 0
    state: str = "running"
    finished_at: float | None = None
    error: str | None = None
    #: ``"storage"`` for a job failed by the database (the CLI exits 10), else None
    error_kind: str | None = None
    report: dict[str, Any] | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    confirmation: ConfirmProgress = field(default_factory=ConfirmProgress)
    task: asyncio.Task[None] | None = None
    _t0: float = field(default_factory=time.monotonic)  # durations: never the wall clock
    _round_times: list[float] = field(default_factory=list)  # time.monotonic() per round

    def progress(self, done: int, total: int) -> None:
        self.rounds_done = done
        self._round_times.append(time.monotonic())

    def eta_s(self) -> float | None:
        """Seconds until the last round ends, from the mean round time so far (None
        before the first round ends or once no round is left). Analysis and
        confirmation rounds come after and are not included."""
        if self.state != "running" or not self._round_times:
            return None
        left = self.rounds_total - self.rounds_done
        if left <= 0:
            return None
        per_round = (self._round_times[-1] - self._t0) / len(self._round_times)
        return per_round * left

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "profile": self.profile, "state": self.state,
            "rounds_done": self.rounds_done, "rounds_total": self.rounds_total,
            "started_at": self.started_at, "finished_at": self.finished_at,
            "eta_s": self.eta_s(), "error": self.error, "error_kind": self.error_kind,
            "report": self.report,
            "confirmation": self.confirmation.as_dict(),
        }  # fmt: skip


class ScreeningJobs:
    """The coordinator's screening jobs (one event loop; no locking needed)."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self.jobs: dict[str, ScreeningJob] = {}

    def start(self, profile: str, rounds: int, runner: Runner | None = None) -> ScreeningJob:
        """Start a job in the background (with ``runner``, default the registry's) and
        return it at once."""
        job = ScreeningJob("s" + secrets.token_hex(6), profile, rounds)
        self.jobs[job.job_id] = job
        job.task = asyncio.get_running_loop().create_task(self._run(job, runner or self._runner))
        self._trim()
        return job

    async def _run(self, job: ScreeningJob, runner: Runner) -> None:
        try:
            job.report = await runner(
                job.profile, job.rounds_total, job.progress, job.cancel, job.confirmation
            )
            job.state = "cancelled" if job.report.get("cancelled") else "done"
        except asyncio.CancelledError:  # shutdown, past the grace of close()
            job.state, job.error = "cancelled", SHUTDOWN_ERROR
            raise
        except NetcheckError as exc:
            job.state, job.error = "failed", str(exc)
            job.error_kind = "storage" if isinstance(exc, StorageError) else None
        except Exception as exc:  # a bug: keep the coordinator up, report it, log it
            log.exception("screening job %s failed", job.job_id)
            job.state, job.error = "failed", f"internal error: {type(exc).__name__}"
        finally:
            job.finished_at = time.time()
        log.info("screening job %s %s after %d of %d rounds", job.job_id, job.state,
                 job.rounds_done, job.rounds_total)  # fmt: skip

    def waiting_for(self, job: ScreeningJob) -> str | None:
        """The id of an earlier job still ``running`` or ``cancelling`` while ``job``
        has run no round yet: only one screening runs at a time, so ``job`` waits for
        it (another client's run, or one whose client was killed). None otherwise."""
        if job.state != "running" or job.rounds_done:
            return None
        for other in self.jobs.values():
            if other is job:
                return None
            if other.state in ("running", "cancelling"):
                return other.job_id
        return None

    def view(self, job: ScreeningJob) -> dict[str, Any]:
        """``job`` as the admin API shows it: :meth:`ScreeningJob.as_dict` and
        ``waiting_for`` (:meth:`waiting_for`)."""
        return {**job.as_dict(), "waiting_for": self.waiting_for(job)}

    def cancel(self, job_id: str) -> ScreeningJob | None:
        """Ask a job to stop after its current round; None for an unknown id."""
        job = self.jobs.get(job_id)
        if job is not None and job.state == "running":
            job.cancel.set()
            job.state = "cancelling"
        return job

    async def close(self, grace_s: float | None = None, cancel_wait_s: float | None = None) -> None:
        """Stop every running job (coordinator shutdown, the admin app's cleanup): ask
        each to stop (no further round starts; a confirmation running stops unjudged),
        wait up to ``grace_s`` (default :data:`STOP_GRACE_S`) for the round in flight to
        end, then cancel what is left and wait up to ``cancel_wait_s`` (default
        :data:`CANCEL_WAIT_S`) more; a job whose task still has not ended is logged as
        an ERROR naming it and left behind (the shutdown goes on).

        The coordinator's ``on_shutdown`` has closed the sessions by then, so the round
        ends ``aborted`` (reason shutdown, no verdicts) within a second unless the
        database is slow or down (its writes' retry budget, then the spool). Cancelling
        the round instead (what this did before session 15) left it ``planned``: a plan
        write in flight still committed in its thread, and nothing ended the round until
        the next start marked it aborted.
        """
        grace_s = STOP_GRACE_S if grace_s is None else grace_s
        running = [j for j in self.jobs.values() if j.task is not None and not j.task.done()]
        for job in running:
            job.cancel.set()
            if job.state == "running":
                job.state = "cancelling"
        tasks = [j.task for j in running if j.task is not None]
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=grace_s)
        for job in running:
            if job.task in late:
                log.warning("screening job %s: its round in flight did not end within %.0f s "
                            "of shutdown; cancelled", job.job_id, grace_s)  # fmt: skip
                job.task.cancel()
        if not late:
            return
        wait_s = CANCEL_WAIT_S if cancel_wait_s is None else cancel_wait_s
        _, stuck = await asyncio.wait(late, timeout=wait_s)
        for job in running:
            if job.task in stuck:
                log.error("screening job %s: its task did not end within %.0f s of being "
                          "cancelled at shutdown; left behind", job.job_id, wait_s)  # fmt: skip
            elif job.task in late:
                with contextlib.suppress(asyncio.CancelledError):
                    await job.task  # done: collects its CancelledError

    def _trim(self) -> None:
        finished = [j for j in self.jobs.values() if j.finished_at is not None]
        for job in finished[:-KEEP_FINISHED]:
            del self.jobs[job.job_id]
