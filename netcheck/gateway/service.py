"""A gateway: a :class:`~netcheck.coordinator.server.Coordinator` whose sessions, rounds
and leadership are shared with other gateways through PostgreSQL (docs/gateways.md).

The websocket endpoint, handshake and session code are the coordinator's own; a gateway
adds (1) a ``gateway_sessions`` row per live session (the same node key on another
gateway supersedes it: close code 4015), (2) a control connection holding its presence
lock and, when won, the leader lock, and (3) a participant task per round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import GatewayConfig, Profile
from netcheck.coordinator.rounds import RoundReport
from netcheck.coordinator.server import Coordinator
from netcheck.coordinator.session import NodeSession
from netcheck.errors import CloseCode, StorageError
from netcheck.gateway.clock import ClockEstimate, estimate_offset
from netcheck.storage import Store
from netcheck.storage.cluster import ClusterStore
from netcheck.storage.pgcontrol import ControlConnection

log = logging.getLogger("netcheck.gateway")

T = TypeVar("T")

#: How often a gateway looks for rounds it was not told about (a missed NOTIFY).
POLL_S = 1.0
#: Retry delays (seconds) of a write that failed because the database is unreachable.
RETRY_DELAYS_S = (0.2, 0.5, 1.0, 2.0, 5.0)
#: How long a database call in a round keeps retrying (seconds).
DB_RETRY_S = 60.0


@dataclass
class GatewayStats:
    """Counters for the gateway's metrics: rounds by part taken, last release loop."""

    rounds: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("joined", "excluded", "reported", "failed"), 0)
    )
    last_release_loop_s: float = 0.0


class GatewayBase(Coordinator):
    """One gateway process: sessions, control connection, waits and retries. The round
    logic (:mod:`~netcheck.gateway.leader`, :mod:`~netcheck.gateway.participant`) is
    plugged in by :class:`netcheck.gateway.gateway.Gateway`, so those modules can depend
    on this one without a cycle.

    Args:
        config: the gateway configuration (PostgreSQL database).
        identity: the deployment's coordinator identity key (the same on every gateway,
            so nodes may connect to any of them).
        profiles: accepted profiles by name.
        store: the shared database.
        wall_ns: this gateway's wall clock (Unix ns); a parameter so tests can give a
            gateway a wrong clock.

    Raises:
        ConfigError: the store is not PostgreSQL.
    """

    def __init__(
        self,
        config: GatewayConfig,
        identity: Ed25519PrivateKey,
        profiles: Mapping[str, Profile],
        store: Store,
        *,
        wall_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        super().__init__(config, identity, profiles, store)
        self.gconfig = config
        self.gateway_id = config.gateway_id
        self.wall_ns = wall_ns
        self.cluster = ClusterStore(store)
        self.control = ControlConnection(self.cluster.deployment, self.gateway_id, self._on_event)
        self.control.on_leadership = self._on_leadership
        self.clock: ClockEstimate | None = None
        self.url = ""
        self.stats = GatewayStats()
        self._changed = asyncio.Event()
        self._participating: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- lifecycle ---------------------------------------------------------------

    async def start_cluster(self, url: str = "") -> None:
        """Register, replay the spool and run the after-round checks it defers (as
        :meth:`~netcheck.coordinator.server.Coordinator.recover` does, without aborting
        rounds: other gateways may be running one), take the presence lock, listen;
        start the background tasks.

        Raises:
            RuntimeError: another live gateway uses this gateway id.
            StorageError: the database is unreachable.
        """
        self.url = url
        await asyncio.to_thread(self.cluster.register_gateway, self.gateway_id, url)
        await asyncio.to_thread(self.recorder.replay)  # what a previous run spooled
        # the checks it deferred (docs/spool.md, "Gateways"), before any round: else they
        # waited for the replayer's first pass, spool_replay_s later
        await self._late_checks()
        await self.control.start()
        await self.control.try_lead()
        self._spawn(self.control.run())
        self._spawn(self._poll())
        if self.gconfig.round_interval_s > 0:
            self._spawn(self._round_timer())

    async def stop_cluster(self) -> None:
        """Cancel background tasks and close the control connection (locks released)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.control.close()

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("gateway %s: background task failed", self.gateway_id,
                      exc_info=task.exception())  # fmt: skip

    # -- sessions ------------------------------------------------------------------

    async def claim_session(self, session: NodeSession) -> None:
        prev = await asyncio.to_thread(
            self.cluster.claim_session,
            self.gateway_id,
            session.node_key,
            session.session_id.hex(),
            session.claim.profile,
            session.fingerprint_id,
            session.peer,
        )
        if prev is not None and prev[0] != self.gateway_id:
            log.info("node %s moved here from gateway %s", session.label, prev[0])

    async def drop_session(self, session: NodeSession) -> None:
        with contextlib.suppress(StorageError):  # a stale row is harmless: joins check it
            await asyncio.to_thread(
                self.cluster.drop_session,
                self.gateway_id,
                session.node_key,
                session.session_id.hex(),
            )

    async def supersede(self, session: NodeSession, by_gateway: str) -> None:
        """Close a session another gateway now holds (close code 4015 SUPERSEDED)."""
        if self.sessions.get(session.node_key) is session:
            del self.sessions[session.node_key]
        log.info("node %s: session superseded by gateway %s", session.label, by_gateway)
        session.fail_waiters()
        await session.ws.close(code=CloseCode.SUPERSEDED, message=b"superseded")

    async def reconcile(self, sessions: list[NodeSession]) -> list[NodeSession]:
        """The sessions whose ``gateway_sessions`` row names this gateway and session;
        the others are closed as superseded (a NOTIFY may have been missed)."""
        owners = await asyncio.to_thread(
            self.cluster.session_owners, [s.node_key for s in sessions]
        )
        mine = []
        for s in sessions:
            owner = owners.get(s.node_key)
            if owner == (self.gateway_id, s.session_id.hex()):
                mine.append(s)
            elif owner is not None:
                await self.supersede(s, owner[0])
            else:  # row lost (e.g. deleted by a restart of this gateway id): claim again
                with contextlib.suppress(StorageError):
                    await self.claim_session(s)
                    mine.append(s)
        return mine

    # -- events --------------------------------------------------------------------

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("e")
        if kind == "superseded":
            s = self.sessions.get(str(event.get("node")))
            if s is not None and (event.get("gw"), event.get("sid")) != (
                self.gateway_id, s.session_id.hex(),
            ):  # fmt: skip
                self._spawn(self.supersede(s, str(event.get("gw"))))
        elif kind == "prepare":
            self._maybe_participate(str(event.get("round")))
        # Every event may change what a waiter is waiting for.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _on_leadership(self, won: bool) -> None:
        if won:
            self._spawn(self.take_over())

    def _maybe_participate(self, round_id: str) -> None:
        if round_id in self._participating:
            return
        self._participating.add(round_id)
        self._spawn(self.participate(round_id))

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            with contextlib.suppress(StorageError):
                for r in await asyncio.to_thread(self.cluster.open_rounds):
                    if r["state"] == "preparing":
                        self._maybe_participate(r["round_id"])
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    async def _round_timer(self) -> None:
        from netcheck.errors import NetcheckError

        profile = next(iter(self.profiles))
        while True:
            await asyncio.sleep(self.gconfig.round_interval_s)
            if self.control.is_leader:
                try:
                    await self.start_round(profile)
                except NetcheckError as exc:
                    log.warning("timed round not run: %s", exc)
                except Exception:  # a bug (e.g. in an after-round check): keep timing rounds
                    log.exception("timed round failed (a bug); the round timer goes on")

    async def wait_for(
        self, check: Callable[[], Awaitable[T | None]], timeout_s: float
    ) -> T | None:
        """Re-run ``check`` on every notification (and at least every ``POLL_S``) until
        it returns a value or ``timeout_s`` passes (then None). Database errors count as
        "not yet": the database may be restarting."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            changed = self._changed
            try:
                value = await check()
            except StorageError as exc:
                log.debug("wait: %s", exc)
                value = None
            if value is not None:
                return value
            left = deadline - loop.time()
            if left <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(POLL_S, left))

    async def retry_write(self, action: str, fn: Callable[[], T]) -> T:
        """Run a database write in a thread, retrying while the database is unreachable
        (the data stays in memory meanwhile); gives up only after ~5 minutes.

        Raises:
            StorageError: the last failure, when every retry failed.
        """
        delays = list(RETRY_DELAYS_S) + [5.0] * 60
        for delay in delays:
            try:
                return await asyncio.to_thread(fn)
            except StorageError as exc:
                if "integrity" in str(exc):
                    raise
                log.warning("gateway %s: %s failed (%s); retrying in %.1f s",
                            self.gateway_id, action, exc, delay)  # fmt: skip
                await asyncio.sleep(delay)
        return await asyncio.to_thread(fn)

    async def replayed(self, round_id: str) -> None:
        """Wait until this gateway's spooled records of ``round_id`` reached the database
        (replaying every ``spool_replay_s``), for as long as :meth:`retry_write` would.

        Raises:
            StorageError: still spooled after that (they stay in the spool and are
                replayed later, at the latest at the next start).
        """
        deadline = asyncio.get_running_loop().time() + sum(RETRY_DELAYS_S) + 5.0 * 60
        while round_id in await asyncio.to_thread(self.recorder.pending):
            if asyncio.get_running_loop().time() > deadline:
                raise StorageError(f"round {round_id}: records still spooled; not reported")
            await asyncio.sleep(self.recorder.replay_every_s)
            await asyncio.to_thread(self.recorder.replay)

    async def measure_clock(self) -> ClockEstimate:
        """Measure and record this gateway's offset to the database clock."""
        samples = await asyncio.to_thread(self.cluster.clock_samples, self.wall_ns)
        self.clock = estimate_offset(samples)
        await asyncio.to_thread(
            self.cluster.record_clock, self.gateway_id, self.clock.offset_s,
            self.clock.uncertainty_s,
        )  # fmt: skip
        return self.clock

    # -- admin API -------------------------------------------------------------------

    async def start_round(self, profile: str) -> RoundReport:
        """Run a cluster round now (:class:`netcheck.gateway.gateway.Gateway`)."""
        raise NotImplementedError

    async def participate(self, round_id: str) -> None:
        """Take part in one round (:class:`netcheck.gateway.gateway.Gateway`)."""
        raise NotImplementedError

    async def take_over(self) -> None:
        """Close what a lost leader left open (:class:`netcheck.gateway.gateway.Gateway`)."""
        raise NotImplementedError

    async def held_by(self) -> dict[str, dict[str, Any]]:
        rows = await asyncio.to_thread(self.cluster.connected_nodes)
        return {r["node_key"]: r for r in rows}

    async def db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a database call of the round path in a thread, retrying for up to about
        ``DB_RETRY_S`` while the database is unreachable (e.g. restarting).

        Raises:
            StorageError: an integrity error at once, else the last failure.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DB_RETRY_S
        delay = RETRY_DELAYS_S[0]
        while True:
            try:
                return await asyncio.to_thread(fn, *args, **kwargs)
            except StorageError as exc:
                if "integrity" in str(exc) or loop.time() + delay > deadline:
                    raise
                log.warning("gateway %s: %s; retrying in %.1f s", self.gateway_id, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_DELAYS_S[-1])
