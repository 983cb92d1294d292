"""Kernel transmit stamps of an emulated node's socket (netcheck.lab.txstamps)."""

from __future__ import annotations

import socket
import time

import pytest

from netcheck.lab.txstamps import TxStamps


def test_transmit_stamps_of_a_write_fall_between_its_start_and_now() -> None:
    """A 31 KB write on loopback is stamped at the scheduler and at the driver, in that
    order, after the write started and before the read-back; stamps of an earlier write
    are drained and not taken for the next one."""
    srv = socket.create_server(("127.0.0.1", 0))
    with srv, socket.create_connection(srv.getsockname()) as c:
        peer, _ = srv.accept()
        with peer:
            try:
                tx = TxStamps(c)
            except OSError as exc:  # pragma: no cover - kernels without SO_TIMESTAMPING
                pytest.skip(f"no transmit timestamps here: {exc}")
            c.send(b"a" * 1000)
            tx.drain()
            start = time.monotonic_ns()
            c.send(b"x" * 31_000)
            got = tx.last_sent(0)
            now = time.monotonic_ns()
            assert tx.unsent() == 0
            sched, snd = got["tx_sched_ns"], got["tx_snd_ns"]
            assert sched is not None and snd is not None
            assert start <= sched <= snd <= now
            assert tx.last_sent(5) == {"tx_sched_ns": None, "tx_snd_ns": None}  # still buffered
            tx.close()
