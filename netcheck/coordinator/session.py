"""One connected node, as the coordinator sees it: the websocket plus the sans-I/O transport.

The reader task (:meth:`NodeSession.read_loop`) is the only place that receives frames
for a session. Arrival times are stamped on the coordinator's monotonic clock in the
socket read callback, where the websocket message completes, before it is queued for
the reader, decrypted or checked (:mod:`netcheck.coordinator.arrivals`; docs/protocol.md,
"Timing"); the reader then opens large frames in a worker pool, off the event loop.
Waiters for acknowledgements, results, echo and probe replies are futures keyed by
round id or nonce; a disconnect fails all of them at once.

Whether a frame may come or be sent now is not decided here: every frame is admitted,
checked against the protocol state table and sealed by the session's sans-I/O core
(:class:`netcheck.protocol.session.Session`, ``NodeSession.protocol``); an illegal one
raises the close code there. The sending side (bounded writes, aborts) is the
:class:`~netcheck.coordinator.writes.BoundedWrites` mixin; the values handed to rounds
are in :mod:`netcheck.coordinator.session_types`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from aiohttp import WSMsgType, web

from netcheck.coordinator.arrivals import ArrivalStamps, FrameOpener, Opened
from netcheck.coordinator.session_types import (
    Arrival,
    NodeDisconnected,
    NodeReportedError,
    ProbeSample,
    is_too_big,
    receive_limits,
)
from netcheck.coordinator.writes import CLOSE_TIMEOUT_S, WRITE_TIMEOUT_S, BoundedWrites
from netcheck.engines import probe as probe_mod
from netcheck.errors import CloseCode, LocalProtocolError, ProtocolError
from netcheck.protocol.messages import (
    Ack,
    Auth,
    Bye,
    Echo,
    EchoReply,
    Error,
    Hello,
    Job,
    Message,
    Probe,
    ProbeReply,
    ProfileClaim,
    Release,
    Result,
    VerdictNotice,
    Welcome,
)
from netcheck.protocol.session import Session
from netcheck.protocol.states import Role, State
from netcheck.protocol.transport import Transport
from netcheck.text import untrusted

log = logging.getLogger("netcheck.coordinator")

__all__ = [
    "CLOSE_TIMEOUT_S",
    "ENDS_SESSION",
    "FROM_NODE",
    "REFUSED_FROM_NODE",
    "WRITE_TIMEOUT_S",
    "Arrival",
    "NodeDisconnected",
    "NodeReportedError",
    "NodeSession",
    "ProbeSample",
    "is_too_big",
    "receive_limits",
]


@dataclass
class NodeSession(BoundedWrites):
    """State of one authenticated node session (coordinator side).

    Attributes:
        node_key: the node's public identity key in text form (``ed25519:...``).
        node_key_raw: the same key, raw 32 bytes (for receipt verification).
        claim: the profile claim from the handshake (signed by the node).
        fingerprint_id: SHA-256 hex of the claimed engine fingerprint.
        ws: the aiohttp websocket.
        transport: the sans-I/O encrypted transport.
        protocol: the sans-I/O session over ``transport`` (:mod:`netcheck.protocol.session`):
            every frame sent or received walks the protocol state table there.
        peer: remote address, for logs.
        tcp: the connection's transport; :meth:`abort` cuts it (None in unit tests).
        abort_reason: why the coordinator aborted the connection, if it did.
        closed_ns: ``time.monotonic_ns()`` when the session was seen closed (None while
            open): in the job's reason when it came after the node's ack (then
            ``missing``, :func:`~netcheck.analysis.verdicts.verify`).
    """

    node_key: str
    node_key_raw: bytes
    claim: ProfileClaim
    fingerprint_id: str
    ws: web.WebSocketResponse
    transport: Transport
    peer: str
    connected_at: float = field(default_factory=time.time)
    rtt_s: float | None = None
    send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _acks: dict[str, asyncio.Future[int]] = field(default_factory=dict)
    _results: dict[str, asyncio.Future[Arrival]] = field(default_factory=dict)
    _echoes: dict[int, asyncio.Future[int]] = field(default_factory=dict)
    _probes: dict[int, asyncio.Future[tuple[int, bytes]]] = field(default_factory=dict)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    tcp: asyncio.Transport | None = None
    abort_reason: str | None = None
    closed_ns: int | None = None
    _writes: set[asyncio.Task[int]] = field(default_factory=set)
    stamps: ArrivalStamps = field(default_factory=ArrivalStamps)
    opener: FrameOpener = field(default_factory=lambda: FrameOpener(workers=0))
    protocol: Session = field(init=False)

    def __post_init__(self) -> None:
        self.protocol = Session(Role.COORDINATOR, self.transport)

    def gone(self) -> bool:
        """True once the session is over for rounds: closed, or failed by the node's own
        input (a frame the state table refuses...), so nothing more can be sealed for it.
        A job or release not sent for this reason is the node's doing (``disconnected``
        if its job never reached the connection, ``missing`` after that), never
        ``coordinator-error``."""
        return self.closed.is_set() or self.protocol.failed is not None

    def holds_job(self, round_id: str) -> bool:
        """The node acknowledged its job of ``round_id`` and still holds it: a release may
        be sealed. False once it reported an ``error`` for the job instead (the state
        table allows that after the ack, docs/protocol.md §6.2; its report is its answer,
        ``missing``), when sealing the release would be the coordinator's own protocol
        error."""
        return self.protocol.job_state(round_id) == State.JOB_PENDING

    def expect_ack(self, round_id: str) -> asyncio.Future[int]:
        """Future resolved with the arrival time (ns) of the node's ``ack`` for a round."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self.closed.is_set():
            fut.set_exception(NodeDisconnected(self.node_key))
        else:
            self._acks[round_id] = fut
        return fut

    def expect_result(self, round_id: str) -> asyncio.Future[Arrival]:
        """Future resolved with the node's ``result`` (or ``error``) for a round."""
        fut: asyncio.Future[Arrival] = asyncio.get_running_loop().create_future()
        if self.closed.is_set():  # gone between ack and release: fail now, not at timeout
            fut.set_exception(NodeDisconnected(self.node_key))
        else:
            self._results[round_id] = fut
        return fut

    def forget_round(self, round_id: str) -> None:
        """Drop waiters of a finished round (late frames are then unexpected)."""
        self._acks.pop(round_id, None)
        self._results.pop(round_id, None)
        self.protocol.forget(round_id)

    async def measure_rtt(self, nonce: int, timeout_s: float) -> float | None:
        """Round-trip time to the node *process* via an application echo, in seconds.

        Websocket pings are answered by aiohttp or by any relay, so they do not measure
        the path to the node process (docs/protocol.md §4). Returns None on timeout,
        disconnect, or a session the node's input already failed (:meth:`gone`: nothing
        more can be sealed for it); raises nothing for those.
        """
        if self.gone():
            return None
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._echoes[nonce] = fut
        write = self.start_send(Echo(nonce=nonce))  # bounded by abort, never cancelled

        async def echo() -> tuple[int, int]:
            t0 = await asyncio.shield(write)
            return t0, await fut

        try:
            t0, t1 = await asyncio.wait_for(echo(), timeout_s)
        except (TimeoutError, NodeDisconnected, ConnectionError):
            return None
        except LocalProtocolError:
            if self.protocol.failed is None:
                raise  # a bug on our side, not a failed session
            return None  # failed between the check above and the seal
        finally:
            self._echoes.pop(nonce, None)
        return (t1 - t0) / 1e9

    async def measure_probe(
        self, nonce: int, challenge: bytes, timeout_s: float
    ) -> ProbeSample | None:
        """Compute-path round trip: a known-answer probe the node runs on its device
        (docs/protocol.md §5.9), timed like :meth:`measure_rtt`; the answer is checked
        against the CPU recomputation (:func:`netcheck.engines.probe.answer`).

        Returns None on timeout, disconnect or a failed session (the node sends no
        reply when its probe fails).

        Raises:
            MessageError: ``challenge`` is not 32 bytes (MALFORMED_MESSAGE).
        """
        raw = await self.probe_rtt(nonce, challenge, timeout_s)
        if raw is None:
            return None
        return ProbeSample(raw[0], raw[1] == probe_mod.answer(challenge))

    async def probe_rtt(
        self, nonce: int, challenge: bytes, timeout_s: float
    ) -> tuple[float, bytes] | None:
        """Like :meth:`measure_probe` but unchecked: (RTT in seconds, the node's answer),
        or None on timeout, disconnect or a session already failed (as
        :meth:`measure_rtt`). The round checks a whole round's answers together, off the
        event loop (:func:`netcheck.engines.probe.answers`).

        Raises:
            MessageError: ``challenge`` is not 32 bytes (MALFORMED_MESSAGE).
        """
        msg = Probe(nonce=nonce, challenge=challenge)
        if self.gone():
            return None
        fut: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._probes[nonce] = fut
        write = self.start_send(msg)  # bounded by abort, never cancelled

        async def probe() -> tuple[int, int, bytes]:
            t0 = await asyncio.shield(write)
            return (t0, *await fut)

        try:
            t0, t1, answer = await asyncio.wait_for(probe(), timeout_s)
        except (TimeoutError, NodeDisconnected, ConnectionError):
            return None
        except LocalProtocolError:
            if self.protocol.failed is None:
                raise
            return None
        finally:
            self._probes.pop(nonce, None)
        return (t1 - t0) / 1e9, answer

    def _dispatch(self, opened: Opened, arrived_ns: int, source: str = "reader") -> None:
        """Route one decrypted message to its handler in :data:`FROM_NODE`; any other
        type (:data:`REFUSED_FROM_NODE`) is a protocol error.

        Raises:
            ProtocolError: UNEXPECTED_MESSAGE for a type a node may not send now, or an
                answer to a round nobody waits for.
        """
        handler = FROM_NODE.get(type(opened.message))
        if handler is None:
            raise ProtocolError(
                CloseCode.UNEXPECTED_MESSAGE,
                f"{type(opened.message).__name__} not allowed from a node",
            )
        handler(self, opened, arrived_ns, source)

    def _on_ack(self, opened: Opened, arrived_ns: int, source: str) -> None:
        msg = cast(Ack, opened.message)
        fut = self._acks.get(msg.round_id)
        if fut is None or fut.done():
            raise ProtocolError(
                CloseCode.UNEXPECTED_MESSAGE, f"ack for unknown round {msg.round_id!r}"
            )
        fut.set_result(arrived_ns)

    def _on_result(self, opened: Opened, arrived_ns: int, source: str) -> None:
        msg = cast(Result | Error, opened.message)
        rfut = self._results.get(msg.round_id)
        afut = self._acks.get(msg.round_id)
        if rfut is None and isinstance(msg, Error) and afut is not None and not afut.done():
            # an error instead of an ack (allowed by the table, §6.2): not ready
            afut.set_exception(NodeReportedError(untrusted(msg.reason)))
            return
        if rfut is None or rfut.done():
            raise ProtocolError(
                CloseCode.UNEXPECTED_MESSAGE, f"result for unknown round {msg.round_id!r}"
            )
        done_ns = time.monotonic_ns()
        if isinstance(msg, Result):
            rfut.set_result(
                Arrival(
                    arrived_ns,
                    msg,
                    None,
                    done_ns,
                    opened.commitment_ok,
                    opened.signature_ok,
                    source,
                )
            )
        else:
            rfut.set_result(
                Arrival(arrived_ns, None, untrusted(msg.reason), done_ns, stamp_source=source)
            )

    def _on_echo_reply(self, opened: Opened, arrived_ns: int, source: str) -> None:
        msg = cast(EchoReply, opened.message)
        efut = self._echoes.get(msg.nonce)
        if efut is not None and not efut.done():
            efut.set_result(arrived_ns)

    def _on_probe_reply(self, opened: Opened, arrived_ns: int, source: str) -> None:
        msg = cast(ProbeReply, opened.message)
        pfut = self._probes.get(msg.nonce)
        if pfut is not None and not pfut.done():
            pfut.set_result((arrived_ns, msg.answer))

    async def read_loop(self) -> CloseCode:
        """Read frames until the session ends; returns the close code to use.

        Raises nothing: a :class:`ProtocolError` raised while reading a frame (bad
        frame, decryption, a message not allowed now) carries its
        :class:`~netcheck.errors.CloseCode`; it ends the loop and is logged here, and
        its code is returned for the server to close the socket with. (The handshake's
        errors are mapped in ``Coordinator.handle_ws``, the node's in ``NodeClient``.)
        """
        code = CloseCode.NORMAL
        try:
            async for wsmsg in self.ws:
                fallback_ns = time.monotonic_ns()
                if wsmsg.type == WSMsgType.ERROR and is_too_big(self.ws.exception()):
                    self.protocol.refuse(CloseCode.MESSAGE_TOO_LARGE, "websocket message too big")
                if wsmsg.type != WSMsgType.BINARY:
                    self.protocol.refuse(
                        CloseCode.PROTOCOL_ERROR, f"{wsmsg.type.name} frame, expected binary"
                    )
                arrived_ns = self.stamps.take(wsmsg.data) or fallback_ns
                source = self.stamps.last_source
                # admitted in order here, opened in the pool, then checked against the
                # state table (protocol.session): an out-of-order message raises
                opened = await self.opener.open(self.protocol, wsmsg.data, self.node_key_raw)
                if isinstance(opened.message, Bye):  # ENDS_SESSION
                    reason = untrusted(opened.message.reason)
                    log.info("node %s said bye: %s", self.label, reason)
                    break
                self._dispatch(opened, arrived_ns, source)
        except ProtocolError as exc:
            log.warning("node %s: closing session: %s", self.label, exc)
            code = exc.code
        finally:
            self.fail_waiters()
        return code

    async def keepalive(self, interval_s: float, misses_allowed: int) -> None:
        """Echo the node process every ``interval_s``; close with IDLE_TIMEOUT after
        ``misses_allowed`` unanswered echoes in a row (docs/protocol.md §6)."""
        misses = 0
        while not self.closed.is_set():
            await asyncio.sleep(interval_s)
            rtt = await self.measure_rtt(secrets.randbits(62), interval_s)
            misses = 0 if rtt is not None else misses + 1
            if misses >= misses_allowed:
                log.warning("node %s: %d echoes unanswered, closing", self.label, misses)
                await self.close_bounded(CloseCode.IDLE_TIMEOUT, b"idle timeout")
                return

    def fail_waiters(self) -> None:
        """Fail every pending waiter with :class:`NodeDisconnected`."""
        if self.closed_ns is None:
            self.closed_ns = time.monotonic_ns()
        self.closed.set()
        for waiters in (self._acks, self._results, self._echoes, self._probes):
            for fut in waiters.values():
                if not fut.done():
                    fut.set_exception(NodeDisconnected(self.node_key))
                    # a waiter whose caller already gave up (an echo or probe past its
                    # timeout, a round's ack) is not awaited again: without this asyncio
                    # logs "Future exception was never retrieved" for an ordinary
                    # disconnect; a caller that still awaits it gets the exception
                    fut.exception()
            waiters.clear()


#: What a node may send after the handshake, by message type: the :class:`NodeSession`
#: method that handles it (``Bye`` is in :data:`ENDS_SESSION`: ``read_loop`` stops).
#: A new message type is one entry here or in :data:`REFUSED_FROM_NODE`
#: (tests/coordinator/test_session_dispatch.py checks that every type is in one of them).
FROM_NODE: dict[type[Message], Callable[[NodeSession, Opened, int, str], None]] = {
    Ack: NodeSession._on_ack,
    Result: NodeSession._on_result,
    Error: NodeSession._on_result,
    EchoReply: NodeSession._on_echo_reply,
    ProbeReply: NodeSession._on_probe_reply,
}
#: Ends the session: ``read_loop`` logs the node's reason and returns.
ENDS_SESSION: frozenset[type[Message]] = frozenset({Bye})
#: Never valid from a node after the handshake: closed with UNEXPECTED_MESSAGE.
REFUSED_FROM_NODE: frozenset[type[Message]] = frozenset(
    {Hello, Welcome, Auth, Job, Release, Echo, Probe, VerdictNotice}
)
