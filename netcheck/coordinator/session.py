"""One connected node, as the coordinator sees it: the websocket plus the sans-I/O transport.

The reader task (:meth:`NodeSession.read_loop`) is the only place that receives frames
for a session. Arrival times are stamped on the coordinator's monotonic clock in the
socket read callback, where the websocket message completes, before it is queued for
the reader, decrypted or checked (:mod:`netcheck.coordinator.arrivals`; docs/protocol.md,
"Timing"); the reader then opens large frames in a worker pool, off the event loop.
Waiters for acknowledgements, results, echo and probe replies are futures keyed by
round id or nonce; a disconnect fails all of them at once.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from aiohttp import WebSocketError, WSCloseCode, WSMsgType, web

from netcheck.config import Profile
from netcheck.coordinator.arrivals import ArrivalStamps, FrameOpener, Opened
from netcheck.engines import probe as probe_mod
from netcheck.errors import CloseCode, ProtocolError
from netcheck.logs import node_label
from netcheck.protocol.codec import DEFAULT_LIMITS, Limits
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
from netcheck.protocol.states import Role
from netcheck.protocol.transport import Transport
from netcheck.text import untrusted

log = logging.getLogger("netcheck.coordinator")

#: A write to a node (echo, probe, ...) that has not reached the socket after this long
#: means the node stopped reading: the connection is aborted (never a cancelled write,
#: style.md rule 16). Dispatch and release use the profile's ``dispatch_timeout_s``.
WRITE_TIMEOUT_S = 10.0
#: A close handshake (superseded, shutdown, idle) that has not finished after this long
#: is cut by aborting the transport.
CLOSE_TIMEOUT_S = 2.0


def receive_limits(profile: Profile, cap: Limits = DEFAULT_LIMITS) -> Limits:
    """Decoder limits for what a node of ``profile`` may send (docs/protocol.md §4.2).

    The largest legitimate node message is a result: B outputs of ``max_new_tokens``
    token ids (msgpack uint32: at most 5 bytes each), a 32-byte commitment, a 64-byte
    signature and a round id. Anything bigger is refused by its length before
    decryption, and the object budget stops decoding work early (adversarial review #4).
    """
    b, n = profile.batch_size, profile.max_new_tokens
    return Limits(
        max_message_bytes=min(cap.max_message_bytes, 5 * b * n + 5 * b + 4096),
        max_array_len=min(cap.max_array_len, max(b, n, 16)),
        max_map_len=min(cap.max_map_len, 16),
        max_str_len=min(cap.max_str_len, 4096),
        max_bin_len=min(cap.max_bin_len, 1024),
        max_depth=min(cap.max_depth, 4),
        max_objects=min(cap.max_objects, b * n + 2 * b + 256),
    )


def is_too_big(exc: BaseException | None) -> bool:
    """True if aiohttp rejected a websocket message for exceeding ``max_msg_size``."""
    return isinstance(exc, WebSocketError) and exc.code == WSCloseCode.MESSAGE_TOO_BIG


@dataclass(frozen=True)
class ProbeSample:
    """One compute probe (docs/protocol.md §5.9).

    Attributes:
        rtt_s: seconds from just before the ``probe`` write to the arrival of the reply.
        correct: the answer equals the coordinator's CPU recomputation.
    """

    rtt_s: float
    correct: bool


class NodeDisconnected(Exception):
    """The node's session ended while a round was waiting for it."""


class NodeReportedError(Exception):
    """The node answered a job with ``error`` instead of ``ack`` (its reason)."""


@dataclass(frozen=True)
class Arrival:
    """A result (or a node-reported error) with its arrival time.

    Attributes:
        arrived_ns: when the bytes completing the frame arrived (``time.monotonic_ns()``
            clock): the kernel's receive stamp where available, else when they were read
            off the socket (before decryption; :mod:`netcheck.coordinator.arrivals`).
        result: the decoded result, or None when the node reported an error.
        error: the node's error reason, if any.
        processed_ns: ``time.monotonic_ns()`` when the frame was opened and checked and
            handed to the round (``processed_ns - arrived_ns`` is the coordinator's own
            delay for this frame, shown in the node's timing budget).
        commitment_ok, signature_ok: the result's checks, done in the worker pool (None
            for an error or when not checked).
        stamp_source: where ``arrived_ns`` came from: ``"kernel"`` (kernel receive
            stamp), ``"read"`` (socket read callback) or ``"reader"`` (reader task).
    """

    arrived_ns: int
    result: Result | None
    error: str | None = None
    processed_ns: int | None = None
    commitment_ok: bool | None = None
    signature_ok: bool | None = None
    stamp_source: str = "reader"


@dataclass
class NodeSession:
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
    _writes: set[asyncio.Task[int]] = field(default_factory=set)
    stamps: ArrivalStamps = field(default_factory=ArrivalStamps)
    opener: FrameOpener = field(default_factory=lambda: FrameOpener(workers=0))
    protocol: Session = field(init=False)

    def __post_init__(self) -> None:
        self.protocol = Session(Role.COORDINATOR, self.transport)

    @property
    def session_id(self) -> bytes:
        """16-byte session id from the key schedule (docs/protocol.md §2.4)."""
        return self.transport.session_id

    @property
    def label(self) -> str:
        """Short name for logs: the node's configured name and key prefix, else its key
        prefix (:func:`netcheck.logs.node_label`)."""
        return node_label(self.node_key)

    async def send(self, msg: Message, write_timeout_s: float = WRITE_TIMEOUT_S) -> None:
        """Seal and write one message; the lock keeps counters in write order.

        Safe to cancel or to bound with a timeout: the write itself runs in its own task
        (:meth:`start_send`) that no caller can cancel, because a cancelled write would
        cancel the drain future every writer of this connection shares (aiohttp), which
        poisons the session. A write still blocked after ``write_timeout_s`` aborts the
        connection instead (:meth:`abort`).

        Raises:
            ConnectionError: the connection is gone or was aborted.
        """
        await asyncio.shield(self.start_send(msg, write_timeout_s))

    def start_send(
        self, msg: Message, write_timeout_s: float = WRITE_TIMEOUT_S
    ) -> asyncio.Task[int]:
        """Start writing ``msg`` in a session-owned task; its result is
        ``time.monotonic_ns()`` just before the bytes went to the socket.

        The task raises ConnectionError if the connection is gone or was aborted."""
        task = asyncio.get_running_loop().create_task(self._write(msg, write_timeout_s))
        self._writes.add(task)
        task.add_done_callback(self._write_done)
        return task

    def _write_done(self, task: asyncio.Task[int]) -> None:
        self._writes.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failed write is logged by the abort, not here

    async def _write(self, msg: Message, write_timeout_s: float) -> int:
        # The bound covers the wait for the lock too: a message that has not reached the
        # socket after write_timeout_s, whoever holds the lock, means the node is not
        # reading.
        watchdog = self._watchdog(write_timeout_s, msg.TYPE)
        try:
            async with self.send_lock:
                if self.abort_reason is not None or self.ws.closed:
                    raise ConnectionError(f"session of {self.label} is closed")
                frame = self.protocol.send(msg)
                sent_ns = time.monotonic_ns()
                await self._send_frame(frame, msg.TYPE)
                return sent_ns
        finally:
            watchdog.cancel()

    def seal(self, msg: Message) -> bytes:
        """Seal ``msg`` through the session's state table (the caller holds
        ``send_lock`` and writes the frame before releasing it, e.g. the release loop).

        Raises:
            LocalProtocolError: ``msg`` may not be sent now, or as :meth:`Transport.seal`.
        """
        return self.protocol.send(msg)

    def _watchdog(self, timeout_s: float, what: str) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(
            timeout_s, self.abort, f"stopped reading: {what} write blocked for {timeout_s:g} s"
        )

    async def write_bounded(self, frame: bytes, timeout_s: float, what: str = "frame") -> None:
        """Write ``frame`` (the caller holds ``send_lock``); if the write is still blocked
        on a node that stopped reading after ``timeout_s``, abort the connection, which
        makes the write fail with ConnectionError. Never cancels the write.

        Raises:
            ConnectionError: the connection is gone or was aborted.
        """
        watchdog = self._watchdog(timeout_s, what)
        try:
            await self._send_frame(frame, what)
        finally:
            watchdog.cancel()

    async def _send_frame(self, frame: bytes, what: str) -> None:
        try:
            await self.ws.send_bytes(frame)
            if self.abort_reason is not None:  # aborted while blocked: drain returned
                raise ConnectionError(self.abort_reason)
        except asyncio.CancelledError:
            # Only reachable when the task itself is cancelled (shutdown): the shared
            # drain future may be cancelled with it, so the connection cannot be reused.
            self.abort(f"{what} write interrupted")
            raise

    def abort(self, reason: str) -> None:
        """Cut the connection now (no close handshake) and fail every waiter. Pending
        writes then fail with ConnectionError and the reader task ends, which
        unregisters the session. Idempotent; the first reason is kept."""
        if self.abort_reason is not None:
            return
        self.abort_reason = reason
        log.warning("node %s: aborting connection: %s", self.label, reason)
        self.fail_waiters()
        if self.tcp is not None:
            self.tcp.abort()

    async def close_bounded(
        self, code: CloseCode, message: bytes, timeout_s: float = CLOSE_TIMEOUT_S
    ) -> None:
        """Close with ``code``; a close handshake not done within ``timeout_s`` (a node
        that stopped reading) is cut by :meth:`abort`."""
        watchdog = asyncio.get_running_loop().call_later(
            timeout_s, self.abort, f"close ({code.name}) not completed in {timeout_s:g} s"
        )
        try:
            await self.ws.close(code=code, message=message)
        except ConnectionError:
            pass
        finally:
            watchdog.cancel()

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
        the path to the node process (docs/protocol.md §4). Returns None on timeout.
        """
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
        finally:
            self._echoes.pop(nonce, None)
        return (t1 - t0) / 1e9

    async def measure_probe(
        self, nonce: int, challenge: bytes, timeout_s: float
    ) -> ProbeSample | None:
        """Compute-path round trip: a known-answer probe the node runs on its device
        (docs/protocol.md §5.9), timed like :meth:`measure_rtt`; the answer is checked
        against the CPU recomputation (:func:`netcheck.engines.probe.answer`).

        Returns None on timeout or disconnect (the node sends no reply when its probe
        fails).

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
        or None on timeout or disconnect. The round checks a whole round's answers
        together, off the event loop (:func:`netcheck.engines.probe.answers`).

        Raises:
            MessageError: ``challenge`` is not 32 bytes (MALFORMED_MESSAGE).
        """
        msg = Probe(nonce=nonce, challenge=challenge)
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
        self.closed.set()
        for waiters in (self._acks, self._results, self._echoes, self._probes):
            for fut in waiters.values():
                if not fut.done():
                    fut.set_exception(NodeDisconnected(self.node_key))
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
