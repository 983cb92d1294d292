"""The coordinator service: websocket endpoint for nodes (``GET /v1/ws``,
docs/protocol.md §2-§4), node registry, round lock and round hooks.

The aiohttp application (this endpoint, the admin API, the dashboard) is assembled in
:mod:`netcheck.coordinator.assembly`; this module imports neither of those.

The handshake runs in :meth:`Coordinator.handle_ws` with a hard timeout; after it, one
reader task per session (:meth:`NodeSession.read_loop`) owns all receives.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from netcheck.config import CoordinatorConfig, Profile
from netcheck.coordinator.arrivals import FrameOpener
from netcheck.coordinator.detection import Screening
from netcheck.coordinator.hooks import RoundHooks
from netcheck.coordinator.late_checks import late_checks
from netcheck.coordinator.limits import (
    HandshakeLimiter,
    SessionSlots,
    SlotRefusal,
    client_address,
    parse_networks,
)
from netcheck.coordinator.rtt import RttProber
from netcheck.coordinator.session import NodeSession, is_too_big, receive_limits
from netcheck.engines.fingerprint import fingerprint_id
from netcheck.errors import CloseCode, HandshakeError, ProtocolError, StorageError
from netcheck.keys import parse_public_key, public_key_bytes, public_key_text
from netcheck.logs import set_node_names
from netcheck.protocol.codec import Limits
from netcheck.protocol.handshake import MAX_HANDSHAKE_BYTES, CoordinatorHandshake
from netcheck.protocol.messages import MAX_REASON_CHARS, Bye
from netcheck.protocol.transport import HEADER_BYTES, TAG_BYTES
from netcheck.storage import Store
from netcheck.storage.durable import Recorder
from netcheck.storage.flags import FlagStore
from netcheck.web.metrics import observe_round
from netcheck.workloads.reservoir import DecoyReservoir

if TYPE_CHECKING:
    from netcheck.coordinator.rounds import RoundReport

log = logging.getLogger("netcheck.coordinator")


def ws_message_cap(max_message_bytes: int, profiles: Iterable[Profile]) -> int:
    """Websocket ``max_msg_size`` (bytes) of the node endpoint (docs/protocol.md §3.3).

    aiohttp buffers a whole message, fragments included, up to this size before netcheck
    sees it, and the cap is fixed before the handshake tells which profile the node
    claims. So it is the largest frame any configured profile's node may send
    (:func:`receive_limits` plus the frame header and tag), never below a handshake
    message nor above ``max_message_bytes`` plus the overhead: about 44 KB for the
    H200 profiles instead of 8 MiB, which bounds what an unauthenticated connection
    can make the coordinator hold.
    """
    largest = max(
        (receive_limits(p, Limits(max_message_bytes=max_message_bytes)).max_message_bytes
         for p in profiles),
        default=max_message_bytes,
    )  # fmt: skip
    return max(largest, MAX_HANDSHAKE_BYTES) + FRAME_OVERHEAD_BYTES


#: A frame is the message plus header and AEAD tag (docs/protocol.md §3.1).
FRAME_OVERHEAD_BYTES = HEADER_BYTES + TAG_BYTES

WS_PATH = "/v1/ws"
HEARTBEAT_S = 15.0
#: Application-level liveness: an echo every KEEPALIVE_S; a session whose node process
#: misses KEEPALIVE_MISSES in a row is closed with IDLE_TIMEOUT (docs/protocol.md §6).
KEEPALIVE_S = 20.0
KEEPALIVE_MISSES = 3
#: At shutdown, how long the last try of after-round checks held in memory may take
#: (seconds): the spool append is quick; running them waits for the database.
HELD_CHECKS_AT_STOP_S = 10.0
#: Message cap (bytes) of a websocket refused over a session cap: it reads only a close.
REFUSED_MSG_BYTES = 256


class Coordinator:
    """Holds node sessions and runs validation rounds.

    Args:
        config: validated coordinator configuration.
        identity: the coordinator's Ed25519 identity key.
        profiles: accepted profiles by name.
        store: the database.
    """

    def __init__(
        self,
        config: CoordinatorConfig,
        identity: Ed25519PrivateKey,
        profiles: Mapping[str, Profile],
        store: Store,
    ) -> None:
        self.config = config
        set_node_names(config.node_names)  # operator's names in log lines
        self.identity = identity
        self.profiles = dict(profiles)
        self.store = store
        self.sessions: dict[str, NodeSession] = {}
        self.allowed = {public_key_bytes(parse_public_key(k)) for k in config.allowed_nodes}
        self.round_lock = asyncio.Lock()
        self.ws_max_msg_size = ws_message_cap(config.max_message_bytes, self.profiles.values())
        self.handshake_failures = 0
        self.stopping = False
        #: Handshake budgets per source and per admitted key (coordinator/limits.py).
        self.limiter = HandshakeLimiter.default(self._known_keys())
        self.trusted_proxies = parse_networks(config.trusted_proxies)
        self.limit_clock = time.monotonic  #: the limiter's clock, seconds (tests replace it)
        #: Concurrent session caps, total and per source (docs/protocol.md §3.3c).
        self.slots = SessionSlots(config.max_sessions, config.max_sessions_per_source)
        self._readers: set[asyncio.Task[None]] = set()
        self.flags = FlagStore(store)  # round schedules and flags
        #: Round results survive a locked or unreachable database (docs/spool.md).
        self.recorder = Recorder(
            store, config.spool_path, retry_s=config.storage_retry_s,
            replay_every_s=config.spool_replay_s,
        )  # fmt: skip
        self._replayer_stop = asyncio.Event()
        self._replayer: asyncio.Task[None] | None = None
        self.round_hooks = RoundHooks()
        self.screening = Screening(self)  # detection: schedule secret, flags, timer
        #: Opens large received frames off the event loop (coordinator/arrivals.py).
        self.opener = FrameOpener()
        self.decoys = DecoyReservoir(config.decoy_workers)  # decoys made ahead of rounds
        #: Echo and probe RTT sets taken between rounds (coordinator/rtt.py).
        self.rtt = RttProber(lambda: self.sessions.values(), config.rtt_refresh_s)
        self._rtt_stop = asyncio.Event()
        self._rtt_task: asyncio.Task[None] | None = None
        self.round_hooks.after_round.append(self.screening.after_round)
        self.round_hooks.finished.append(observe_round)  # Prometheus metrics

    # -- admission ---------------------------------------------------------------

    def admit(self, node_key: bytes) -> bool:
        """True if a node key may open a session (allowlist, or open enrollment).

        A refusal is logged with the key, so the operator can copy it into
        ``allowed_nodes`` if the node is wanted.
        """
        if self.config.open_enrollment or node_key in self.allowed:
            return True
        text = public_key_text(Ed25519PublicKey.from_public_bytes(node_key))
        log.warning("node key %s is not in allowed_nodes: refused", text)
        return False

    def _known_keys(self) -> list[str]:
        """Keys seen before (database), most recent first: known under open enrollment."""
        if not self.config.open_enrollment:
            return []
        try:
            return [row["node_key"] for row in self.store.list_nodes()]
        except StorageError as exc:  # the limiter then learns keys as they join
            log.warning("known node keys not loaded: %s", exc)
            return []

    # -- websocket endpoint ------------------------------------------------------

    async def handle_ws(self, request: web.Request) -> web.StreamResponse:
        """Accept a node: take a session slot (else close with ``TRY_AGAIN_LATER``),
        handshake, register, then read until the session ends; the slot is given back
        when this returns."""
        peer = client_address(
            request.remote, request.headers.getall("X-Forwarded-For", []), self.trusted_proxies
        )
        slots = self.slots  # the one the slot was taken from, even if a test swaps it
        refusal = slots.acquire(peer)
        if refusal is not None:
            return await self._refuse_slot(request, peer, refusal)
        try:
            return await self._handle_ws(request, peer)
        finally:
            slots.release(peer)

    async def _refuse_slot(
        self, request: web.Request, peer: str, refusal: SlotRefusal
    ) -> web.WebSocketResponse:
        """Close an upgrade over a session cap before any handshake work: a websocket
        that accepts only a close frame (tiny message cap) and waits 2 s at most for it."""
        if refusal.first:
            limit = "max_sessions" if refusal.scope == "total" else "max_sessions_per_source"
            log.warning(
                "session from %s refused: %s = %d reached (further refusals not logged "
                "until a slot frees)", peer, limit, refusal.limit,
            )  # fmt: skip
        ws = web.WebSocketResponse(max_msg_size=REFUSED_MSG_BYTES, compress=False, timeout=2.0)
        await ws.prepare(request)
        await ws.close(code=CloseCode.TRY_AGAIN_LATER, message=b"too many sessions")
        return ws

    async def _handle_ws(self, request: web.Request, peer: str) -> web.StreamResponse:
        ws = web.WebSocketResponse(
            # aiohttp refuses a message whose length *equals* max_msg_size: + 1 lets
            # the largest legal frame through (docs/protocol.md §3.3).
            max_msg_size=self.ws_max_msg_size + 1,
            compress=False,
            heartbeat=HEARTBEAT_S,
        )
        await ws.prepare(request)
        # Nothing is refused here: the attempt is charged once its outcome is known, to
        # the source if it proves no admitted key, else to the key (docs/protocol.md §3.3b).
        try:
            session = await asyncio.wait_for(
                self._handshake(ws, peer), self.config.handshake_timeout_s
            )
            session.tcp = request.transport
        except TimeoutError:
            self.handshake_failures += 1
            if not self.limiter.failed(peer, self.limit_clock()):
                return await self._refuse(ws, peer)
            log.warning("handshake from %s timed out", peer)
            await ws.close(code=CloseCode.HANDSHAKE_TIMEOUT, message=b"handshake timeout")
            return ws
        except ProtocolError as exc:
            self.handshake_failures += 1
            if not self.limiter.failed(peer, self.limit_clock()):
                return await self._refuse(ws, peer)
            log.warning("handshake from %s rejected: %s", peer, exc)
            reason = exc.code.name.lower()
            if exc.code is CloseCode.PROFILE_MISMATCH:  # the node is authenticated by now
                reason += ": accepted profiles " + ", ".join(sorted(self.profiles))
            await ws.close(code=exc.code, message=reason.encode()[:123])  # RFC 6455 §5.5
            return ws
        except ConnectionError:
            self.limiter.failed(peer, self.limit_clock())
            return ws
        listed = session.node_key_raw in self.allowed
        if not self.limiter.succeeded(
            peer, session.node_key, listed=listed, now=self.limit_clock()
        ):
            return await self._refuse(ws, peer, session.label)
        session.stamps.install(request, ws)  # stamp where each message completes
        session.opener = self.opener
        await self._serve(session)
        return ws

    async def _refuse(
        self, ws: web.WebSocketResponse, peer: str, who: str = ""
    ) -> web.WebSocketResponse:
        log.warning("handshake from %s%s refused: rate limit", peer, f" ({who})" if who else "")
        await ws.close(code=CloseCode.RATE_LIMITED, message=b"rate limited")
        return ws

    async def _receive_binary(self, ws: web.WebSocketResponse) -> bytes:
        msg = await ws.receive()
        if msg.type == WSMsgType.BINARY:
            return bytes(msg.data)
        if msg.type == WSMsgType.ERROR and is_too_big(ws.exception()):  # aiohttp sent 1009
            raise HandshakeError(CloseCode.MESSAGE_TOO_LARGE, "handshake message over the cap")
        if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
            raise ConnectionError("peer closed during handshake")
        # Not a binary message: PROTOCOL_ERROR, as after the handshake (§8.1).
        raise HandshakeError(CloseCode.PROTOCOL_ERROR, f"{msg.type.name} frame during handshake")

    async def _handshake(self, ws: web.WebSocketResponse, peer: str) -> NodeSession:
        hs = CoordinatorHandshake(self.identity, self.admit)  # endpoint name: §2.1
        welcome = hs.receive_hello(await self._receive_binary(ws))
        await ws.send_bytes(welcome)
        accepted = hs.receive_auth(await self._receive_binary(ws))
        claim = accepted.claim
        node_key = public_key_text(Ed25519PublicKey.from_public_bytes(accepted.node_key))
        if claim.profile not in self.profiles:
            # The node is authenticated and holds the session keys: say it in a sealed
            # bye, the only refusal a node may take as final (docs/protocol.md §8.1).
            said = "profile_mismatch: accepted profiles " + ", ".join(sorted(self.profiles))
            bye = Bye(reason=said[:MAX_REASON_CHARS])
            await ws.send_bytes(accepted.transport.seal(bye))
            raise HandshakeError(
                CloseCode.PROFILE_MISMATCH,
                f"node {node_key} claims unknown profile {claim.profile!r}",
            )
        fp_id = fingerprint_id(claim.fingerprint)
        accepted.transport.limit_receive(receive_limits(self.profiles[claim.profile]))
        return NodeSession(
            node_key=node_key,
            node_key_raw=accepted.node_key,
            claim=claim,
            fingerprint_id=fp_id,
            ws=ws,
            transport=accepted.transport,
            peer=peer,
        )

    async def _serve(self, session: NodeSession) -> None:
        # Persist before we count the node as connected (architecture.md: persist first).
        try:
            await asyncio.to_thread(
                self.store.upsert_node,
                session.node_key,
                self.config.node_names.get(session.node_key, ""),
                session.claim.profile,
                session.fingerprint_id,
                dict(session.claim.fingerprint),
                time.time(),
            )
            await self.claim_session(session)
        except StorageError as exc:
            log.error("node %s refused for now: %s", session.label, exc)
            await session.close_bounded(CloseCode.TRY_AGAIN_LATER, b"try again later")
            return
        # Supersede after the await, right before registering, so two sessions with the
        # same key that finish their handshakes together cannot both stay open.
        old = self.sessions.get(session.node_key)
        self.sessions[session.node_key] = session
        if old is not None:
            log.info("node %s reconnected; closing its previous session", session.label)
            old.fail_waiters()
            await old.close_bounded(CloseCode.SUPERSEDED, b"superseded")
        log.info(
            "node %s joined from %s: profile=%s fingerprint=%s",
            session.label,
            session.peer,
            session.claim.profile,
            session.fingerprint_id[:12],
        )
        keepalive = asyncio.get_running_loop().create_task(
            session.keepalive(KEEPALIVE_S, KEEPALIVE_MISSES)
        )
        code = await session.read_loop()
        keepalive.cancel()
        if self.sessions.get(session.node_key) is session:
            del self.sessions[session.node_key]
            await self.drop_session(session)
        if not session.ws.closed:
            await session.close_bounded(code, code.name.lower().encode())
        try:  # "last seen" is when the session ended, not when it began
            await asyncio.to_thread(self.store.touch_node, session.node_key, time.time())
        except StorageError as exc:
            log.warning("node %s: last-seen time not stored: %s", session.label, exc)
        log.info("node %s left (close code %d %s)", session.label, int(code), code.name)

    async def claim_session(self, session: NodeSession) -> None:
        """Hook: make ``session`` the node's one live session beyond this process (a
        gateway records it in the shared database). Raises StorageError to refuse the
        node for now (closed with TRY_AGAIN_LATER). One process: nothing to do."""

    async def drop_session(self, session: NodeSession) -> None:
        """Hook: ``session`` ended and was this process's session of its node."""

    async def start_round(self, profile: str) -> RoundReport:
        """Run a round now (admin API ``POST /admin/rounds``); see
        :func:`netcheck.coordinator.rounds.run_round` for the errors raised."""
        from netcheck.coordinator.rounds import run_round

        return await run_round(self, profile)

    def extra_collectors(self) -> list[Any]:
        """Prometheus collectors beyond the coordinator's own (``GET /metrics``)."""
        return []

    async def held_by(self) -> dict[str, dict[str, Any]] | None:
        """Several gateways: ``node_key -> session row`` (with ``gateway_id``) of every
        node connected to any live gateway. One process: None."""
        return None

    # -- lifecycle ----------------------------------------------------------------

    def recover_rounds(self) -> int:
        """At startup: replay the spool (docs/spool.md), then mark rounds a previous run
        left unfinished as ``aborted``, except those whose results still wait in the
        spool. Returns the number aborted. Blocking (database).

        Raises:
            StorageError: the database or the spool failed.
        """
        report = self.recorder.replay()
        if report.replayed:
            log.warning("replayed %d spooled round record(s) at startup", len(report.replayed))
        keep = list(self.recorder.pending())
        return self.recorder.call(
            "abort unfinished rounds", lambda: self.store.abort_unfinished_rounds(keep=keep)
        )

    async def recover(self) -> int:
        """At startup, before any round: :meth:`recover_rounds`, then the after-round
        checks of the rounds replayed from the spool (docs/spool.md). Returns the number
        of rounds aborted.

        Raises:
            StorageError: the database or the spool failed.
        """
        aborted = await asyncio.to_thread(self.recover_rounds)
        await self._late_checks()
        return aborted

    async def _late_checks(self) -> None:
        """The after-round checks of replayed rounds (:func:`late_checks`), between
        rounds (under the round lock)."""
        async with self.round_lock:
            await late_checks(self)

    async def on_startup(self, app: web.Application) -> None:
        """Start the background spool replay (docs/spool.md) and the RTT prober."""
        self._replayer_stop.clear()
        self._replayer = asyncio.ensure_future(
            self.recorder.run_replayer(self._replayer_stop, self._late_checks)
        )
        self._rtt_stop.clear()
        self._rtt_task = asyncio.ensure_future(self.rtt.run(self._rtt_stop))

    async def on_shutdown(self, app: web.Application) -> None:
        """Close every session with SHUTDOWN; a round in flight ends as aborted."""
        self.stopping = True  # a round in flight ends as aborted, blaming no node
        # All at once, each bounded: a node that stopped reading cannot hold up the rest.
        await asyncio.gather(
            *(s.close_bounded(CloseCode.SHUTDOWN, b"shutdown") for s in self.sessions.values())
        )

    async def on_cleanup(self, app: web.Application) -> None:
        """Stop the spool replay (after-round checks still held in memory go to the spool
        or run, else are logged as lost), the RTT prober and the frame opener's worker
        threads."""
        self._replayer_stop.set()
        self._rtt_stop.set()
        if self._replayer is not None:
            await self._replayer
        await self._keep_held_checks()
        if self._rtt_task is not None:
            await self._rtt_task
        await asyncio.to_thread(self.opener.close)
        self.decoys.close()

    async def _keep_held_checks(self) -> None:
        """At shutdown: after-round checks held in memory only (docs/spool.md) go to the
        spool if it takes writes again, or run if the database does (one last
        :meth:`_late_checks`; the replayer's next pass will not come); those still held
        are lost with this process: logged as an ERROR naming their rounds (their
        results are stored; their checks never run)."""
        if not self.recorder.held:
            return
        try:  # bounded: a database that does not answer at all must not hold up the stop
            await asyncio.wait_for(self._late_checks(), HELD_CHECKS_AT_STOP_S)
        except TimeoutError:
            log.warning("shutdown: the last try of the held after-round checks did not end "
                        "within %.0f s", HELD_CHECKS_AT_STOP_S)  # fmt: skip
        if held := self.recorder.held:
            log.error(
                "shutdown: the after-round checks of %d recorded round(s) are lost: %s; "
                "they were held in memory only (the spool %s cannot be written and the "
                "database refused them); the rounds' results are stored, their checks "
                "will not run", len(held), ", ".join(h.removesuffix("/checks") for h in held),
                self.recorder.spool.path,
            )  # fmt: skip

    def connected(self, profile: str | None = None) -> list[NodeSession]:
        """Connected sessions, optionally only those claiming ``profile``."""
        return [s for s in self.sessions.values() if profile is None or s.claim.profile == profile]
