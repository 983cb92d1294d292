"""Kernel receive timestamps on the coordinator's node connections (Linux
``SO_TIMESTAMPNS``; docs/protocol.md "Timing"; docs/kernel-stamps.md).

The kernel stamps every incoming packet when it enters the network stack (for a NIC in
the driver's receive path, for loopback when the sender's write hands it over), before
any process is scheduled. With ``SO_TIMESTAMPNS`` set on a TCP socket, each ``recvmsg``
returns, as ancillary data, that stamp of the **last** packet (skb) the read consumed
(``tcp_recvmsg`` → ``tcp_recv_timestamp``). Taken this way, a result's arrival time
does not depend on when the coordinator's event loop got round to the connection: a
loop busy for 300 ms with other sessions' results still stamps each one when its bytes
came in.

Pieces:

- :class:`StampingSocket`: a ``socket.socket`` whose ``recv``/``recv_into`` (what
  asyncio's selector transport calls: ``recv`` for plain protocols, ``recv_into`` for
  buffered ones such as TLS) use ``recvmsg`` and keep the read's kernel stamp.
- :class:`KernelStampSite`: an aiohttp site that accepts connections itself and hands
  each one, as a :class:`StampingSocket` with the option set, to
  ``loop.connect_accepted_socket`` (public asyncio API; TLS works as with
  ``create_server``). Where the option is unavailable (not Linux, an exotic
  architecture, a kernel without it: checked once by a loopback self-test) it serves
  with ``loop.create_server`` like ``aiohttp.web.TCPSite`` and logs a warning; the
  stamps then come from the monotonic clock in the socket read callback.
- :class:`ClockMap`: kernel stamps are ``CLOCK_REALTIME``; the coordinator's clock is
  ``CLOCK_MONOTONIC``. Their offset is read back to back at every conversion (three
  ``clock_gettime`` calls, the narrowest of up to three tries), so the conversion error
  is at most half that window (< 1 us typically; tries wider than ``MAX_WINDOW_NS`` are
  discarded). Frequency slewing (NTP) moves both clocks alike and leaves the offset
  unchanged; only a step of the wall clock (``settimeofday``, a leap second) changes
  it. A change larger than ``STEP_TOLERANCE_NS`` between two conversions is logged as a
  step, and for ``STEP_QUARANTINE_NS`` afterwards conversions return None (the caller
  uses the read-callback stamp), since a stamp taken before the step is ambiguous.
  Residual, documented: bytes that waited in the socket buffer longer than the
  quarantine across a step are off by the step.

Alternatives considered: ``SO_TIMESTAMPING`` with ``SOF_TIMESTAMPING_RX_SOFTWARE |
SOF_TIMESTAMPING_SOFTWARE`` gives the same software stamp in a three-timespec struct
(and hardware stamps on capable NICs, which need ``SIOCSHWTSTAMP`` privileges; not
needed for millisecond goals); reading the stamp with private asyncio API (the
transport's ``_sock``, a subclassed transport) would break silently on a Python
upgrade; a BPF/pcap tap needs privileges the coordinator should not have.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import platform
import socket
import ssl
import struct
import sys
import time
import weakref
from collections.abc import Sequence
from typing import Any

from aiohttp import web

log = logging.getLogger("netcheck.coordinator")

#: ``SO_TIMESTAMPNS_NEW`` (Linux >= 5.1, asm-generic/socket.h): ``struct
#: __kernel_timespec`` (two signed 64-bit ints) on every word size.
SO_TIMESTAMPNS_NEW = 64
#: ``SO_TIMESTAMPNS_OLD``: native ``struct timespec`` (two longs); kernels before 5.1.
SO_TIMESTAMPNS_OLD = 35
#: Architectures whose socket option numbers are not asm-generic's.
_OTHER_NUMBERING = ("alpha", "mips", "parisc", "sparc")
#: Ancillary buffer for one timespec cmsg (room for two, should another be added).
ANC_BYTES = socket.CMSG_SPACE(16) * 2 if hasattr(socket, "CMSG_SPACE") else 0
#: A back-to-back clock read wider than this (the thread was preempted) is retried.
MAX_WINDOW_NS = 20_000
#: A change of the realtime-monotonic offset larger than this is a wall-clock step.
STEP_TOLERANCE_NS = 100_000
#: After a step, kernel stamps are not converted for this long (read stamps are used).
STEP_QUARANTINE_NS = 2_000_000_000
#: A kernel stamp converted to later than "now" by more than this is rejected.
FUTURE_TOLERANCE_NS = 1_000_000

#: Arrival stamp sources, as recorded per result (``NodeTiming.arrival_stamp``).
SOURCE_KERNEL = "kernel"  # SO_TIMESTAMPNS receive stamp of the read's last packet
SOURCE_READ = "read"  # CLOCK_MONOTONIC in the socket read callback
SOURCE_READER = "reader"  # CLOCK_MONOTONIC in the session's reader task


def parse_rx_timestamp(
    ancdata: list[tuple[int, int, bytes]], cmsg_type: int, fmt: str = "=qq"
) -> int | None:
    """The receive timestamp (realtime ns) in ``recvmsg`` ancillary data, or None.

    Args:
        ancdata: ``recvmsg``'s list of ``(level, type, data)``.
        cmsg_type: ``SCM_TIMESTAMPNS`` (equal to the ``SO_TIMESTAMPNS`` option set).
        fmt: struct format of the timespec (``"=qq"`` for the ``_NEW`` option,
            native ``"@ll"`` for the old one).
    """
    size = struct.calcsize(fmt)
    for level, ctype, data in ancdata:
        if level == socket.SOL_SOCKET and ctype == cmsg_type and len(data) >= size:
            sec, nsec = struct.unpack_from(fmt, data)
            return int(sec) * 1_000_000_000 + int(nsec)
    return None


def clock_offset_ns(tries: int = 3, clock: Any = time.clock_gettime_ns) -> tuple[int, int]:
    """``CLOCK_REALTIME - CLOCK_MONOTONIC`` in ns, and its uncertainty (half the
    narrowest window of ``tries`` back-to-back reads: monotonic, realtime, monotonic)."""
    best: tuple[int, int] | None = None
    for _ in range(tries):
        m1 = clock(time.CLOCK_MONOTONIC)
        r = clock(time.CLOCK_REALTIME)
        m2 = clock(time.CLOCK_MONOTONIC)
        window = m2 - m1
        if best is None or window < best[1]:
            best = (r - (m1 + m2) // 2, window)
        if window <= MAX_WINDOW_NS:
            break
    assert best is not None
    return best[0], (best[1] + 1) // 2


class ClockMap:
    """Converts kernel (``CLOCK_REALTIME``) stamps to the coordinator's
    ``CLOCK_MONOTONIC`` (module docstring: error bound, steps)."""

    def __init__(self, clock: Any = time.clock_gettime_ns) -> None:
        self._clock = clock
        self._last_offset: int | None = None
        self._quarantine_until = 0
        self.steps = 0

    def to_monotonic(self, realtime_ns: int, now_ns: int) -> int | None:
        """``realtime_ns`` on the monotonic clock, or None when it cannot be trusted
        (just after a wall-clock step, or later than ``now_ns``, the monotonic time of
        the read that returned it)."""
        offset, _err = clock_offset_ns(clock=self._clock)
        last, self._last_offset = self._last_offset, offset
        if last is not None and abs(offset - last) > STEP_TOLERANCE_NS:
            self.steps += 1
            self._quarantine_until = now_ns + STEP_QUARANTINE_NS
            log.warning(
                "wall clock stepped by %+.3f ms: kernel receive stamps not used for %.0f s",
                (offset - last) / 1e6, STEP_QUARANTINE_NS / 1e9,
            )  # fmt: skip
        if now_ns < self._quarantine_until:
            return None
        mono = realtime_ns - offset
        if mono > now_ns:
            return now_ns if mono - now_ns <= FUTURE_TOLERANCE_NS else None
        return mono


CLOCK = ClockMap()

#: Open stamping sockets by file descriptor (removed on close, before the fd is freed).
_by_fd: weakref.WeakValueDictionary[int, StampingSocket] = weakref.WeakValueDictionary()


class StampingSocket(socket.socket):
    """A socket whose reads keep the kernel receive stamp of their last packet.

    ``rx_realtime_ns`` is the stamp of the latest ``recv``/``recv_into`` (None when that
    read carried none: option off, or nothing read). Enable stamping with
    :func:`enable_rx_timestamps` (which sets ``cmsg_type``/``fmt``).
    """

    __slots__ = ("rx_realtime_ns", "cmsg_type", "fmt")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rx_realtime_ns: int | None = None
        self.cmsg_type = -1
        self.fmt = "=qq"

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data, anc, _flags, _addr = self.recvmsg(bufsize, ANC_BYTES, flags)
        self.rx_realtime_ns = parse_rx_timestamp(anc, self.cmsg_type, self.fmt) if anc else None
        return data

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        if nbytes:
            view = view[:nbytes]
        n, anc, _flags, _addr = self.recvmsg_into([view], ANC_BYTES, flags)
        self.rx_realtime_ns = parse_rx_timestamp(anc, self.cmsg_type, self.fmt) if anc else None
        return n

    def arrival_ns(self, now_ns: int) -> tuple[int, str]:
        """Arrival stamp (monotonic ns) of the latest read and its source: the kernel
        stamp converted by :data:`CLOCK`, else ``now_ns`` (the read callback's clock)."""
        rt = self.rx_realtime_ns
        if rt is not None:
            mono = CLOCK.to_monotonic(rt, now_ns)
            if mono is not None:
                return mono, SOURCE_KERNEL
        return now_ns, SOURCE_READ

    def close(self) -> None:
        fd = self.fileno()
        if _by_fd.get(fd) is self:
            del _by_fd[fd]
        super().close()


def enable_rx_timestamps(sock: StampingSocket) -> None:
    """Set ``SO_TIMESTAMPNS`` (``_NEW``, else ``_OLD``) on ``sock`` and register it
    for :func:`stamping_socket`.

    Raises:
        OSError: the kernel refused both options.
    """
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS_NEW, 1)
        sock.cmsg_type, sock.fmt = SO_TIMESTAMPNS_NEW, "=qq"
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS_OLD, 1)
        sock.cmsg_type, sock.fmt = SO_TIMESTAMPNS_OLD, "@ll"
    _by_fd[sock.fileno()] = sock


def stamping_socket(transport: asyncio.BaseTransport | None) -> StampingSocket | None:
    """The :class:`StampingSocket` under ``transport`` (plain or TLS), or None."""
    if transport is None:
        return None
    tsock = transport.get_extra_info("socket")
    fd = tsock.fileno() if tsock is not None else -1
    return _by_fd.get(fd) if fd >= 0 else None


_support: str | None = None


def kernel_stamps_unsupported() -> str | None:
    """Why kernel receive stamps cannot be used here, or None when they work.

    Checked once per process by a loopback self-test: a TCP connection, one byte
    written, read back with :class:`StampingSocket`; the stamp must be present and,
    converted, lie between the write and the read.
    """
    global _support
    if _support is None:
        _support = _self_test()
    return _support or None


#: Holds SO_TIMESTAMPNS for the process's lifetime once the self-test passed: the
#: kernel turns packet stamping on (a static key) only while some socket asks for it,
#: and turns it on *deferred*, from a workqueue, so a socket that set the option a
#: moment ago may get its first packets unstamped (seen here: 13 of 20 fresh
#: connections). With this socket open, stamping stays on (cost: one clock read per
#: received packet, host-wide, as while any tcpdump runs).
_keeper: socket.socket | None = None
#: The self-test waits this long at most for the deferred enabling to take effect.
SELF_TEST_WAIT_S = 2.0


def _self_test() -> str:
    global _keeper
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    if platform.machine().lower().startswith(_OTHER_NUMBERING):
        return f"socket option numbers of {platform.machine()} not known"
    if not hasattr(socket.socket, "recvmsg") or not ANC_BYTES:
        return "socket.recvmsg unavailable"
    keeper = StampingSocket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        enable_rx_timestamps(keeper)
        with socket.create_server(("127.0.0.1", 0)) as lsock:
            client = socket.create_connection(lsock.getsockname(), timeout=2.0)
            conn, _ = lsock.accept()
            sock = StampingSocket(conn.family, conn.type, conn.proto, fileno=conn.detach())
            with client, sock:
                enable_rx_timestamps(sock)
                sock.settimeout(2.0)
                deadline = time.monotonic() + SELF_TEST_WAIT_S
                while True:
                    before = time.monotonic_ns()
                    client.sendall(b"x")
                    sock.recv(16)
                    after = time.monotonic_ns()
                    if sock.rx_realtime_ns is not None:
                        break
                    if time.monotonic() > deadline:
                        keeper.close()
                        return f"no SCM_TIMESTAMPNS on a TCP read within {SELF_TEST_WAIT_S} s"
                    time.sleep(0.01)  # the kernel enables stamping from a workqueue
                stamp, source = sock.arrival_ns(after)
                if source != SOURCE_KERNEL or not before - 1_000_000 <= stamp <= after:
                    keeper.close()
                    return f"kernel stamp {stamp - before} ns after the write, not within it"
    except OSError as exc:
        keeper.close()
        return f"self-test failed: {exc}"
    _keeper = keeper
    return ""


class KernelStampSite(web.BaseSite):
    """An aiohttp TCP site whose connections carry kernel receive stamps (module
    docstring); falls back to ``loop.create_server`` (logged) where unsupported.

    ``source`` says which: :data:`SOURCE_KERNEL` or :data:`SOURCE_READ`.
    """

    __slots__ = ("_host", "_port", "_bound_port", "source")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str | None = None,
        port: int = 8080,
        *,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host = host
        self._port = port
        self._bound_port: int | None = None
        self.source = SOURCE_READ

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host or '0.0.0.0'}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port once started (useful with port 0), else the requested one."""
        return self._bound_port if self._bound_port is not None else self._port

    async def start(self) -> None:
        """Listen and serve (raises OSError as ``create_server`` does, e.g. port in use)."""
        await super().start()
        loop = asyncio.get_running_loop()
        factory = self._runner.server
        assert factory is not None
        why = kernel_stamps_unsupported()
        socks: Sequence[socket.socket]
        if why is None:
            socks = _listen(self._host, self._port, self._backlog)
            self._server = _AcceptServer(loop, socks, factory, self._ssl_context, self._backlog)
            self.source = SOURCE_KERNEL
            log.info("arrival stamps: kernel receive timestamps (SO_TIMESTAMPNS)")
        else:
            server = await loop.create_server(
                factory, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog
            )
            self._server, socks = server, server.sockets
            log.warning(
                "arrival stamps: kernel receive timestamps unavailable (%s); stamping in "
                "the socket read callback instead (carries the event loop's queueing)",
                why,
            )
        self._bound_port = socks[0].getsockname()[1] if socks else self._port


def _listen(host: str | None, port: int, backlog: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for ``host`` (every address it resolves
    to; all interfaces for None or "") like ``loop.create_server``.

    Raises:
        OSError: cannot resolve or bind.
    """
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    seen = set()
    try:
        for family, type_, proto, _name, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            s = socket.socket(family, type_, proto)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(socks) > 1:  # same ephemeral port on every address
                addr = (addr[0], socks[0].getsockname()[1], *addr[2:])
            s.bind(addr)
            s.listen(backlog)
            s.setblocking(False)
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


class _AcceptServer(asyncio.AbstractServer):
    """Accepts on ``socks`` and serves each connection with ``factory`` through
    ``loop.connect_accepted_socket`` as a :class:`StampingSocket`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        socks: list[socket.socket],
        factory: Any,
        ssl_context: ssl.SSLContext | None,
        backlog: int,
    ) -> None:
        self._loop = loop
        self._socks = socks
        self._factory = factory
        self._ssl = ssl_context
        self._backlog = backlog
        self._tasks: set[asyncio.Task[None]] = set()
        self._serving = True
        for s in socks:
            loop.add_reader(s.fileno(), self._accept, s)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._socks)

    def _accept(self, lsock: socket.socket) -> None:
        for _ in range(self._backlog):
            try:
                conn, _addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno == errno.ECONNABORTED:
                    continue
                # EMFILE, ENFILE, ENOBUFS, ENOMEM: pause accepting, as asyncio does
                log.error("accept on %s failed (%s); retrying in 1 s", lsock.getsockname(), exc)
                self._loop.remove_reader(lsock.fileno())
                self._loop.call_later(1.0, self._resume, lsock)
                return
            sock = StampingSocket(conn.family, conn.type, conn.proto, fileno=conn.detach())
            sock.setblocking(False)
            try:
                enable_rx_timestamps(sock)
            except OSError as exc:  # the self-test passed, so this is unexpected
                log.warning("SO_TIMESTAMPNS refused on an accepted socket: %s", exc)
            task = self._loop.create_task(self._serve(sock))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _resume(self, lsock: socket.socket) -> None:
        if self._serving and lsock.fileno() >= 0:
            self._loop.add_reader(lsock.fileno(), self._accept, lsock)

    async def _serve(self, sock: StampingSocket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, sock, ssl=self._ssl)
        except (TimeoutError, OSError, ssl.SSLError) as exc:  # e.g. a failed TLS handshake
            log.debug("connection setup failed: %s", exc)
            sock.close()
        except asyncio.CancelledError:  # the site closed during a TLS handshake
            sock.close()
            raise

    def close(self) -> None:
        """Stop accepting and close the listening sockets (served connections stay)."""
        if not self._serving:
            return
        self._serving = False
        for s in self._socks:
            if s.fileno() >= 0:
                self._loop.remove_reader(s.fileno())
            s.close()
        for task in self._tasks:
            task.cancel()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        return None

    async def serve_forever(self) -> None:
        raise NotImplementedError("use aiohttp's runner")
