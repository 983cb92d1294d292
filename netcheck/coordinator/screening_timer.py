"""The screening timer: screening rounds in the background, started and stopped with the app.

:class:`ScreeningTimer` calls its host's ``tick`` (one screening round per profile, and
the analysis every ``screening_analyze_every`` rounds:
:meth:`netcheck.coordinator.detection.Screening.tick`) every ``screening_interval_s``
seconds, from the app's startup to its shutdown (:meth:`ScreeningTimer.attach`). It
holds only the task and the two flags that order a shutdown; what a tick does, and the
detection state, stay with :class:`~netcheck.coordinator.detection.Screening`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from netcheck.config import CoordinatorConfig

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger("netcheck.screening")

#: At shutdown, how long the app's cleanup waits for a timer round in flight to end as
#: ``aborted`` (:meth:`ScreeningTimer.attach`). Its sessions are closed by then, so it
#: ends in well under a second unless the database is down: then ``storage_retry_s``
#: (10 s by default) of retries before the spool. After this the timer task is cancelled.
TIMER_STOP_GRACE_S = 30.0


class TimerHost(Protocol):
    """What the timer needs of :class:`~netcheck.coordinator.detection.Screening`: the
    configuration (read at each use: ``screening_interval_s``) and one step."""

    @property
    def config(self) -> CoordinatorConfig: ...

    async def tick(self) -> None: ...


class ScreeningTimer:
    """The background task that runs ``host.tick()`` every ``screening_interval_s``.

    ``stopping`` is set when the app's shutdown begins: the timer starts no further
    round, and ``tick`` reads it to stop between profiles. ``task`` is the running
    timer task, or None.
    """

    def __init__(self, host: TimerHost) -> None:
        self.host = host
        self.task: asyncio.Task[None] | None = None
        self.sleeping = False  # the timer waits between ticks (safe to cancel)
        self.stopping = False  # shutdown began: the timer starts no further round

    def attach(self, app: web.Application) -> None:
        """Start the timer with ``app`` (if ``screening_interval_s > 0``) and stop it on
        shutdown.

        At shutdown a timer round in flight ends like any round then (an admin-run one
        included): the coordinator's ``on_shutdown`` closes the sessions and the round
        is stored ``aborted`` (reason ``shutdown``, no verdicts, no node blamed;
        :func:`~netcheck.coordinator.rounds.run_round`). So ``on_shutdown`` here only
        stops the timer from starting another round (cancelling it at once when it
        waits between rounds), and ``on_cleanup``, which runs after every
        ``on_shutdown``, waits for the round in flight (at most
        :data:`TIMER_STOP_GRACE_S`) before cancelling the timer. Cancelling the round
        itself would leave it ``planned`` until the next start marks it aborted.
        """
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        app.on_cleanup.append(self._on_cleanup)

    async def _on_startup(self, app: web.Application) -> None:
        self.stopping = False
        if self.host.config.screening_interval_s > 0:
            self.start()

    async def _on_shutdown(self, app: web.Application) -> None:
        self.stopping = True
        if self.sleeping:
            await self.stop()

    async def _on_cleanup(self, app: web.Application) -> None:
        timer = self.task
        if timer is not None and not timer.done():
            try:
                await asyncio.wait_for(asyncio.shield(timer), TIMER_STOP_GRACE_S)
            except TimeoutError:
                log.warning("screening timer: the round in flight did not end within %.0f s "
                            "of shutdown; cancelled", TIMER_STOP_GRACE_S)  # fmt: skip
        await self.stop()

    def start(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """Run ``host.tick()`` every ``screening_interval_s`` in the background (no-op
        while the task runs); ``sleep`` waits between ticks (a test passes a fast one)."""
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._loop(sleep))

    async def stop(self) -> None:
        """Cancel the timer task, if any, and wait for it."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    async def _loop(self, sleep: Callable[[float], Awaitable[None]]) -> None:
        log.info("screening timer: one round per profile every %.1f s",
                 self.host.config.screening_interval_s)  # fmt: skip
        while not self.stopping:
            self.sleeping = True
            try:
                await sleep(self.host.config.screening_interval_s)
            finally:
                self.sleeping = False
            if self.stopping:
                break
            await self.host.tick()
