"""Bounded writes of one node session (style.md rule 16: timeouts never cancel shared
state): a write that has not reached the socket in time aborts the connection instead
of being cancelled, because a cancelled write would cancel the drain future every
writer of the connection shares (aiohttp). Every frame is sealed through the session's
state table (:class:`netcheck.protocol.session.Session`). A mixin of
:class:`~netcheck.coordinator.session.NodeSession`, which holds the attributes below.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiohttp import web

from netcheck.errors import CloseCode
from netcheck.logs import node_label
from netcheck.protocol.messages import Message
from netcheck.protocol.session import Session
from netcheck.protocol.transport import Transport

log = logging.getLogger("netcheck.coordinator")

#: A write to a node (echo, probe, ...) that has not reached the socket after this long
#: means the node stopped reading: the connection is aborted (never a cancelled write,
#: style.md rule 16). Dispatch and release use the profile's ``dispatch_timeout_s``.
WRITE_TIMEOUT_S = 10.0
#: A close handshake (superseded, shutdown, idle) that has not finished after this long
#: is cut by aborting the transport.
CLOSE_TIMEOUT_S = 2.0


class BoundedWrites:
    """Sending side of a node session: sealed, ordered, bounded writes and aborts."""

    node_key: str
    ws: web.WebSocketResponse
    transport: Transport
    protocol: Session
    send_lock: asyncio.Lock
    tcp: asyncio.Transport | None
    abort_reason: str | None
    _writes: set[asyncio.Task[int]]

    def fail_waiters(self) -> None:
        """Fail every pending waiter (the session implements it)."""
        raise NotImplementedError

    @property
    def session_id(self) -> bytes:
        """16-byte session id from the key schedule (docs/protocol.md §2.4)."""
        return self.transport.session_id

    @property
    def label(self) -> str:
        """Short name for logs: the node's configured name and key prefix, else its key
        prefix (:func:`netcheck.logs.node_label`)."""
        return node_label(self.node_key)

    async def send(
        self,
        msg: Message,
        write_timeout_s: float = WRITE_TIMEOUT_S,
        on_sent: Callable[[int], None] | None = None,
    ) -> None:
        """Seal and write one message; the lock keeps counters in write order.

        Safe to cancel or to bound with a timeout: the write itself runs in its own task
        (:meth:`start_send`) that no caller can cancel, because a cancelled write would
        cancel the drain future every writer of this connection shares (aiohttp), which
        poisons the session. A write still blocked after ``write_timeout_s`` aborts the
        connection instead (:meth:`abort`).

        ``on_sent`` is called with ``time.monotonic_ns()`` as the frame is handed to the
        connection (its first bytes, the websocket header that gives its length, can
        reach the node from then), even if the rest of the write then blocks or fails.

        Raises:
            ConnectionError: the connection is gone or was aborted.
        """
        await asyncio.shield(self.start_send(msg, write_timeout_s, on_sent))

    def start_send(
        self,
        msg: Message,
        write_timeout_s: float = WRITE_TIMEOUT_S,
        on_sent: Callable[[int], None] | None = None,
    ) -> asyncio.Task[int]:
        """Start writing ``msg`` in a session-owned task; its result is
        ``time.monotonic_ns()`` just before the bytes went to the socket (``on_sent``,
        if given, is called with it then, as :meth:`send`).

        The task raises ConnectionError if the connection is gone or was aborted."""
        task = asyncio.get_running_loop().create_task(self._write(msg, write_timeout_s, on_sent))
        self._writes.add(task)
        task.add_done_callback(self._write_done)
        return task

    def _write_done(self, task: asyncio.Task[int]) -> None:
        self._writes.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failed write is logged by the abort, not here

    async def _write(
        self, msg: Message, write_timeout_s: float, on_sent: Callable[[int], None] | None
    ) -> int:
        # The bound covers the wait for the lock too: a message that has not reached the
        # socket after write_timeout_s, whoever holds the lock, means the node is not
        # reading.
        watchdog = self._watchdog(write_timeout_s, msg.TYPE)
        try:
            async with self.send_lock:
                closing = self.tcp is not None and self.tcp.is_closing()
                if self.abort_reason is not None or self.ws.closed or closing:
                    raise ConnectionError(f"session of {self.label} is closed")
                frame = self.protocol.send(msg)
                sent_ns = time.monotonic_ns()
                if on_sent is not None:
                    # No await from the checks above to the socket write (no compression):
                    # the frame's header goes out now.
                    on_sent(sent_ns)
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
