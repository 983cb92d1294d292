"""EMULATION support (lab only): kernel *transmit* timestamps of a sending socket.

The timing benchmark (``scripts/bench_timing.py``) measures the coordinator's arrival
stamp against the moment an emulated node started its write. On one host with 1,000
emulated senders, part of that gap is the *sender's* stack (scheduling, pacing, softirq
work deferred to ``ksoftirqd``), not the coordinator. Linux can stamp each ``sendmsg``'s
last byte as it passes the packet scheduler (``SCM_TSTAMP_SCHED``) and the device driver
(``SCM_TSTAMP_SND``; for loopback, the hand-over to the receiving side), which splits
the gap into

- **sender**: ``tx_snd - send_start`` (the emulated host's own stack), and
- **path**: ``arrival - tx_snd`` (loopback delivery plus the coordinator's stamp; with
  kernel receive stamps the coordinator adds nothing that runs in user space).

Source: Linux Documentation/networking/timestamping.rst (``SO_TIMESTAMPING``,
``SOF_TIMESTAMPING_TX_SCHED``/``TX_SOFTWARE``/``OPT_TSONLY``, the error queue and
``struct sock_extended_err``). Stamps are ``CLOCK_REALTIME``; they are mapped to
``CLOCK_MONOTONIC`` with :data:`netcheck.coordinator.rxstamps.CLOCK`.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import time

from netcheck.coordinator.rxstamps import CLOCK

#: ``SO_TIMESTAMPING`` (asm-generic/socket.h, the ``_OLD`` form: native ``timespec``).
SO_TIMESTAMPING = 37
SOF_TIMESTAMPING_TX_SOFTWARE = 1 << 1
SOF_TIMESTAMPING_SOFTWARE = 1 << 4
SOF_TIMESTAMPING_TX_SCHED = 1 << 8
SOF_TIMESTAMPING_OPT_TSONLY = 1 << 11
FLAGS = (
    SOF_TIMESTAMPING_TX_SOFTWARE
    | SOF_TIMESTAMPING_TX_SCHED
    | SOF_TIMESTAMPING_SOFTWARE
    | SOF_TIMESTAMPING_OPT_TSONLY
)
#: ``ee_info`` of a timestamp on the error queue (linux/errqueue.h).
SCM_TSTAMP_SND, SCM_TSTAMP_SCHED = 0, 1
SO_EE_ORIGIN_TIMESTAMPING = 4
IP_RECVERR, IPV6_RECVERR = 11, 25
#: ``SIOCOUTQNSD`` (linux/sockios.h): bytes in the send queue not yet sent.
SIOCOUTQNSD = 0x894B
_EXT_ERR = struct.Struct("=IBBBBII")
_TS3 = struct.Struct("@6l")  # struct scm_timestamping: 3 x struct timespec


class TxStamps:
    """Transmit stamps of one TCP socket (a ``dup`` of its descriptor, so the owner's
    asyncio transport is untouched).

    Call :meth:`drain` right before a write (discarding older stamps) and
    :meth:`last_sent` right after it. Pending stamps make the socket report
    ``EPOLLERR``, so the owner must drain promptly (an unread error queue wakes its
    event loop on every iteration).

    Raises:
        OSError: the kernel refused ``SO_TIMESTAMPING`` (the caller goes without).
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = socket.socket(fileno=os.dup(sock.fileno()))
        self._sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, FLAGS)

    def drain(self) -> dict[int, int]:
        """Read every queued stamp; returns the newest ``CLOCK_REALTIME`` ns per kind
        (``SCM_TSTAMP_SND``, ``SCM_TSTAMP_SCHED``)."""
        newest: dict[int, int] = {}
        while True:
            try:
                _, ancdata, _, _ = self._sock.recvmsg(
                    1, 512, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT
                )
            except (BlockingIOError, InterruptedError):
                return newest
            ts = kind = None
            for level, ctype, data in ancdata:
                if level == socket.SOL_SOCKET and ctype == SO_TIMESTAMPING:
                    sec, nsec = _TS3.unpack_from(data)[:2]  # ts[0]: software
                    ts = sec * 1_000_000_000 + nsec
                elif (level, ctype) in (
                    (socket.IPPROTO_IP, IP_RECVERR),
                    (socket.IPPROTO_IPV6, IPV6_RECVERR),
                ):
                    err = _EXT_ERR.unpack_from(data)
                    if err[1] == SO_EE_ORIGIN_TIMESTAMPING:
                        kind = err[5]
            if ts and kind is not None:
                newest[kind] = max(ts, newest.get(kind, 0))

    def unsent(self) -> int:
        """Bytes of this socket's send queue the kernel has not sent yet."""
        buf = fcntl.ioctl(self._sock.fileno(), SIOCOUTQNSD, b"\0\0\0\0")
        return int(struct.unpack("i", buf)[0])

    def last_sent(self, user_buffered: int) -> dict[str, int | None]:
        """Monotonic ns of the last byte written so far passing the scheduler and the
        driver (``tx_sched_ns``, ``tx_snd_ns``), or None when not all bytes have left
        yet (``user_buffered`` > 0: still in the owner's buffer; or unsent in the
        kernel) or no stamp came."""
        if user_buffered or self.unsent():
            return {"tx_sched_ns": None, "tx_snd_ns": None}
        got = self.drain()
        now = time.monotonic_ns()
        return {
            "tx_sched_ns": _mono(got.get(SCM_TSTAMP_SCHED), now),
            "tx_snd_ns": _mono(got.get(SCM_TSTAMP_SND), now),
        }

    def close(self) -> None:
        self._sock.close()


def _mono(realtime_ns: int | None, now_ns: int) -> int | None:
    return None if realtime_ns is None else CLOCK.to_monotonic(realtime_ns, now_ns)
