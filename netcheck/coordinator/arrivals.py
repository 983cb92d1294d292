"""Arrival stamps taken where a websocket message completes, and frame opening off the
event loop (docs/protocol.md, "Timing"; docs/scaling.md, "Timing accuracy").

Two pieces of the coordinator's I/O layer; the protocol core (``Transport``) stays
sans-I/O and unchanged:

- :class:`ArrivalStamps` wraps the websocket parser of one session's HTTP protocol
  object. When a chunk of bytes read from the socket completes one or more binary
  websocket messages, each of them is stamped with the **kernel receive timestamp** of
  the read that delivered that chunk (the receive time of the last packet it consumed,
  :mod:`netcheck.coordinator.rxstamps`, converted to ``time.monotonic_ns()``'s clock),
  when the connection was accepted by :class:`~netcheck.coordinator.rxstamps.KernelStampSite`
  on Linux. Such a stamp does not depend on when the event loop got to the connection:
  results arriving while the loop reads, parses or opens 1,000 others are stamped when
  their bytes came in. Otherwise (another site, no kernel support, a read without a
  stamp) the stamp is ``time.monotonic_ns()`` read just before the chunk was parsed, in
  the socket read callback: before the message waits in aiohttp's queue for the
  session's reader task, and before decryption, decoding and signature checks, but
  after the loop's queue of ready sockets. Each stamp records its source
  (``kernel``/``read``/``reader``).
- :class:`FrameOpener` opens (authenticates, decrypts, decodes) frames and checks a
  result's commitment and receipt signature in a bounded pool of worker threads, so a
  burst of large results does not hold the event loop (and hence the release loop, the
  heartbeats and, without kernel stamps, the stamps of frames arriving meanwhile) for
  B x max_new_tokens ints per node.

Alternatives considered: stamping in the reader task (the old way) puts every session
behind the decoding done by the tasks woken before it (44-96 ms apart for 40-60 H200
results at once, issue 11); a process pool would move the GIL out of the way, paying a
pickle of the decoded outputs back into the loop per result (0.3 ms vs 7-10 ms of
opening on the loaded 2-core machine) but needs the stateful ``Transport`` split;
not done yet (docs/kernel-stamps.md has the measurement).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import multiprocessing
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

from netcheck.coordinator.rxstamps import (
    SOURCE_KERNEL,
    SOURCE_READ,
    SOURCE_READER,
    StampingSocket,
    stamping_socket,
)
from netcheck.errors import LocalProtocolError, ProtocolError
from netcheck.protocol.jobs import commitment, verify_receipt
from netcheck.protocol.messages import Message, Result
from netcheck.protocol.session import Session
from netcheck.protocol.transport import AdmittedFrame, Transport, open_admitted

log = logging.getLogger("netcheck.coordinator")

#: Frames at most this long (bytes) are opened inline on the event loop: a thread hop
#: (~50 us) costs more than opening an ack, echo reply or probe reply (< 150 bytes).
#: Every result goes to the pool, even a small one: opened inline, 1,000 cpu-tiny
#: results (1.8 KB) woken together held the loop's next socket read for all of them.
INLINE_FRAME_BYTES = 512
#: Worker threads of the default :class:`FrameOpener`. The work holds the GIL for most
#: of its time (msgpack hooks, the result's checks), so more threads add no CPU, and
#: each extra thread is one more waiter the event loop can lose the GIL hand-off to.
OPEN_WORKERS = 1
#: GIL switch interval (seconds) set while a pool is running: a worker thread that holds
#: the GIL delays the event loop's next socket read (and so its arrival stamps) by up to
#: this long; Python's default is 5 ms.
SWITCH_INTERVAL_S = 0.0005


class ArrivalStamps:
    """Arrival stamps of one websocket session's binary messages, in arrival order.

    Install with :meth:`install` after the websocket is prepared. :meth:`take` returns
    the stamp of a message the reader received (matched by identity of its payload)
    and sets :attr:`last_source`; a message parsed outside the wrapped path (aiohttp
    resumes a parser that stalled on a full queue by calling it directly) has no stamp,
    and ``take`` returns None (``last_source`` is then ``"reader"``: the caller stamps).

    Attributes:
        source: where this session's stamps come from when a read carries a kernel
            stamp: ``"kernel"`` if its socket is a kernel-stamping one, else ``"read"``.
        last_source: the source of the stamp :meth:`take` returned last.
    """

    def __init__(self) -> None:
        self._pending: collections.deque[tuple[object, int, str]] = collections.deque()
        self.installed = False
        self.missed = 0
        self.source = SOURCE_READER
        self.last_source = SOURCE_READER

    def install(self, request: web.BaseRequest, ws: web.WebSocketResponse) -> bool:
        """Wrap the websocket parser of ``request``'s protocol; True if installed.

        Relies on two aiohttp internals (``RequestHandler._payload_parser`` and the
        ``WebSocketDataQueue`` buffer, ``aiohttp>=3.11``); if either is missing the
        stamps fall back to the reader task (logged once), and
        ``tests/coordinator/test_arrivals.py`` fails, so an aiohttp upgrade that
        changes them is noticed.
        """
        proto: Any = request.protocol
        queue: Any = getattr(ws, "_reader", None)
        parser = getattr(proto, "_payload_parser", None)
        buffer = getattr(queue, "_buffer", None)
        if parser is None or not isinstance(buffer, collections.deque):
            _warn_fallback()
            return False
        sock = stamping_socket(request.transport)
        proto._payload_parser = _StampingParser(parser, buffer, self._pending, sock)
        self.installed = True
        self.source = SOURCE_KERNEL if sock is not None else SOURCE_READ
        return True

    def take(self, data: object) -> int | None:
        """The stamp of the binary message whose payload is ``data``, or None."""
        pending = self._pending
        while pending:
            head, stamp, source = pending[0]
            if head is data:
                pending.popleft()
                self.last_source = source
                return stamp
            if not any(d is data for d, _, _ in pending):
                break  # not stamped: leave the later stamps for their messages
            pending.popleft()  # a stamped message the reader never saw (cannot happen)
        self.missed += 1
        self.last_source = SOURCE_READER
        return None


_warned = False


def _warn_fallback() -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "aiohttp internals changed: arrival stamps taken in the reader task instead "
            "of the socket read callback (less precise under bursts; docs/protocol.md)"
        )


class _StampingParser:
    """Forwards to aiohttp's websocket parser; stamps the binary messages a chunk
    completes with the kernel receive stamp of the read that delivered the chunk (when
    ``sock`` has one), else with the clock read before the chunk was parsed."""

    __slots__ = ("_parser", "_buffer", "_pending", "_sock")

    def __init__(
        self,
        parser: Any,
        buffer: collections.deque[Any],
        pending: collections.deque[tuple[object, int, str]],
        sock: StampingSocket | None = None,
    ) -> None:
        self._parser = parser
        self._buffer = buffer
        self._pending = pending
        self._sock = sock

    def feed_data(self, data: bytes) -> Any:
        now = time.monotonic_ns()
        before = len(self._buffer)
        out = self._parser.feed_data(data)
        added = len(self._buffer) - before
        if added > 0:
            # feed_data runs inside the transport's data_received (plain or TLS), so the
            # socket's latest read is the one that delivered ``data``
            stamp, source = (now, SOURCE_READ) if self._sock is None else self._sock.arrival_ns(now)
            for i in range(len(self._buffer) - added, len(self._buffer)):
                msg = self._buffer[i][0]
                if msg.type is WSMsgType.BINARY:
                    self._pending.append((msg.data, stamp, source))
        return out

    def __getattr__(self, name: str) -> Any:  # feed_eof and anything else aiohttp calls
        return getattr(self._parser, name)


@dataclass(frozen=True)
class Opened:
    """A frame opened by :meth:`FrameOpener.open`.

    Attributes:
        message: the decoded message.
        commitment_ok: for a ``Result``: its commitment equals
            :func:`~netcheck.protocol.jobs.commitment` of its outputs; else None.
        signature_ok: for a ``Result``: its receipt signature verifies under the
            node's key for this session and round; else None.
        opened_ns: ``time.monotonic_ns()`` when opening finished (in the worker).
    """

    message: Message
    commitment_ok: bool | None = None
    signature_ok: bool | None = None
    opened_ns: int = 0


def open_checked(admitted: AdmittedFrame, node_key: bytes) -> Opened:
    """Open an admitted frame (:func:`~netcheck.protocol.transport.open_admitted`) and
    check a result's commitment and receipt. Pure: runs inline, in a worker thread or
    in a worker process (its argument and result are picklable).

    Raises:
        ProtocolError: as :func:`~netcheck.protocol.transport.open_admitted`.
    """
    msg = open_admitted(admitted)
    if isinstance(msg, Result):
        try:
            c_ok = commitment(msg.outputs) == msg.commitment
        except LocalProtocolError:  # cannot happen: decoding checked the token ids
            c_ok = False
        s_ok = verify_receipt(
            node_key, msg.signature, admitted.session_id, msg.round_id, msg.commitment
        )
        return Opened(msg, c_ok, s_ok, time.monotonic_ns())
    return Opened(msg, opened_ns=time.monotonic_ns())


def open_frame(transport: Transport, frame: bytes, node_key: bytes) -> Opened:
    """Admit ``frame`` on ``transport`` and :func:`open_checked` it, in one call (the
    benchmarks' and tests' form; a session uses :meth:`FrameOpener.open`).

    Raises:
        ProtocolError: as :meth:`Transport.open`.
    """
    admitted = transport.admit(frame)
    try:
        return open_checked(admitted, node_key)
    except ProtocolError as exc:
        transport.fail(exc, admitted)
        raise


#: Kinds of :class:`FrameOpener` pool.
OPENER_KINDS = ("thread", "process")


class FrameOpener:
    """Opens received frames: small ones inline, large ones in a pool of ``workers``.

    The session admits each frame on the event loop, in arrival order (its counter and
    key schedule: :meth:`Session.admit`); only the AEAD, decoding and the result's
    checks (:func:`open_checked`) go to the pool, then the message walks the session's
    state table (:meth:`Session.receive_message`), again on the loop.

    Args:
        workers: pool size (bounded; 0 opens every frame inline, the old behaviour, kept
            for comparison in ``scripts/bench_timing.py``).
        inline_bytes: frames up to this size are opened on the event loop.
        kind: ``"thread"`` (default: threads holding the GIL for most of the work) or
            ``"process"`` (worker processes: the loop thread only unpickles the opened
            message; ``benchmarks/opener_pool.py`` compares the two).

    Raises:
        ValueError: unknown ``kind``.
    """

    def __init__(
        self, workers: int = OPEN_WORKERS, inline_bytes: int = INLINE_FRAME_BYTES,
        kind: str = "thread",
    ):  # fmt: skip
        if kind not in OPENER_KINDS:
            raise ValueError(f"frame opener kind must be one of {OPENER_KINDS}, not {kind!r}")
        self.workers = workers
        self.inline_bytes = inline_bytes
        self.kind = kind
        self._executor: Executor | None = None
        self._switch_interval: float | None = None

    def _pool(self) -> Executor:
        if self._executor is None:
            if self.kind == "process":
                ctx = multiprocessing.get_context("spawn")  # no fork of a running loop
                self._executor = ProcessPoolExecutor(self.workers, mp_context=ctx)
            else:
                self._executor = ThreadPoolExecutor(
                    self.workers, thread_name_prefix="netcheck-open"
                )
                self._switch_interval = sys.getswitchinterval()
                sys.setswitchinterval(min(self._switch_interval, SWITCH_INTERVAL_S))
        return self._executor

    async def open(self, session: Session, frame: bytes, node_key: bytes) -> Opened:
        """Admit, open and check one frame of ``session`` and take its transition.

        Raises:
            ProtocolError: as :meth:`Transport.open` and :meth:`Session.receive_message`;
                the session is then failed.
        """
        admitted = session.admit(frame)
        try:
            if self.workers <= 0 or len(frame) <= self.inline_bytes:
                opened = open_checked(admitted, node_key)
            else:
                loop = asyncio.get_running_loop()
                opened = await loop.run_in_executor(self._pool(), open_checked, admitted, node_key)
        except ProtocolError as exc:
            session.fail(exc, admitted)
            raise
        session.receive_message(opened.message)
        return opened

    def close(self) -> None:
        """Stop the workers (pending frames finish first) and restore the GIL switch
        interval."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None
