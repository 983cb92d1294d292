"""Writes to a node that stopped reading (#12 item 3): a bound never cancels a write
(style.md rule 16), a blocked node is aborted and blamed as disconnected, the
coordinator's own failures blame no node, and shutdown stays fast."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fault_support import RawNode, light_profile

from netcheck.config import DeadlineParams
from netcheck.coordinator.rounds import run_round
from netcheck.coordinator.session import NodeSession
from netcheck.errors import LocalProtocolError
from netcheck.lab.load import HashWorker, add_hash_references
from netcheck.lab.testing import RunningCoordinator, running_coordinator
from netcheck.protocol.messages import Echo, Job
from netcheck.storage import Store

PROFILE = light_profile(  # deadline 1.5 + 0.2 + 1.0 = 2.7 s, within the result timeout
    dispatch_timeout_s=1.0, result_timeout_s=3.0, deadline=DeadlineParams(t_ref_s=1.0, slack_s=1.0)
)
LONG_S = 30.0  # write bound of the filler frames: far beyond every wait of these tests


def small_buffers(s: NodeSession, node: RawNode) -> None:
    """Shrink the socket buffers at both ends and the transport's high-water mark, so a
    few kilobytes unread make the coordinator's writes wait."""
    assert s.tcp is not None
    s.tcp.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    s.tcp.set_write_buffer_limits(high=1024)
    node.ws._writer.transport.get_extra_info("socket").setsockopt(  # type: ignore[union-attr]
        socket.SOL_SOCKET, socket.SO_RCVBUF, 4096
    )


async def stall(rc: RunningCoordinator, node: RawNode) -> NodeSession:
    """Make ``node`` stop reading with small buffers at both ends and fill them, so the
    coordinator's next write to it blocks; returns its session."""
    s = rc.coord.sessions[node.key]
    small_buffers(s, node)
    node.stop_reading()
    for i in range(20_000):
        task = s.start_send(Echo(i), LONG_S)
        done, _ = await asyncio.wait({task}, timeout=0.05)
        if not done:
            return s
    raise AssertionError("the coordinator's writes never blocked")


async def test_timed_out_send_does_not_poison_the_connection(tmp_path: Path) -> None:
    """A send bounded by wait_for on a stalled node times out without cancelling the
    shared drain: a later large write and the timed-out one reach the node when it reads
    again."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        node = await RawNode.connect(rc, PROFILE, Ed25519PrivateKey.generate())
        await rc.wait_connected(1, timeout_s=10.0)
        s = rc.coord.sessions[node.key]
        small_buffers(s, node)
        node.stop_reading()
        # Frames above aiohttp's 64 KiB writer limit wait on the connection's shared
        # drain future once the node stops reading. Each is bounded by wait_for; the
        # first that times out would, if its write were cancelled, leave that future
        # cancelled, and the next large write would raise CancelledError in a task
        # nobody cancelled (a close would end as 1006).
        sent = []
        for k in range(200):
            job = Job(f"f{k}", bytes(12), bytes(100_000), 16, 4, 5.0)
            sent.append(job.round_id)
            try:
                await asyncio.wait_for(s.send(job, LONG_S), 0.5)
            except TimeoutError:
                break
        else:
            raise AssertionError("the coordinator's writes never blocked")
        # aiohttp internals, read only: the drain future every writer shares must not
        # have been cancelled by the timeout (it was, before #12).
        protocol = getattr(s.ws._writer, "protocol", None)
        waiter = getattr(protocol, "_drain_waiter", None)
        assert waiter is None or not waiter.cancelled()
        big = Job("r1", bytes(12), bytes(100_000), 16, 4, 5.0)
        later = asyncio.create_task(s.send(big, LONG_S))
        await asyncio.sleep(0.1)
        node.ws._writer.transport.resume_reading()  # type: ignore[union-attr]
        node.stalled = False
        seen: list[str] = []
        while True:
            msg = node.transport.open((await node.ws.receive(timeout=10.0)).data)
            if isinstance(msg, Job):
                seen.append(msg.round_id)
            if msg == big:
                break
        await asyncio.wait_for(later, 5.0)  # no CancelledError from a shared drain future
        assert seen == [*sent, "r1"]  # the timed-out write was not lost either
        assert s.abort_reason is None and rc.coord.sessions[node.key] is s
        await node.close()


async def test_stalled_node_is_aborted_and_disconnected_not_missing(tmp_path: Path) -> None:
    """A node whose job write blocks is aborted within the dispatch bound, unregistered,
    scored `disconnected` (not `missing`), and the same key can reconnect at once."""
    store = Store(f"sqlite:///{tmp_path / 'n.db'}")
    add_hash_references(store, PROFILE, 40)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.start(rc.node(HashWorker(PROFILE.max_new_tokens), PROFILE.name))
        identity = Ed25519PrivateKey.generate()
        deaf = await RawNode.connect(rc, PROFILE, identity)
        await rc.wait_connected(2, timeout_s=10.0)
        await stall(rc, deaf)
        report = await asyncio.wait_for(run_round(rc.coord, PROFILE.name), 30.0)
        got = {o.node_key: o for o in report.outcomes}
        assert str(got[deaf.key].verdict) == "disconnected"
        assert got[deaf.key].reason.startswith("stopped reading")
        assert [str(o.verdict) for k, o in got.items() if k != deaf.key] == ["pass"]
        async with asyncio.timeout(5.0):
            while deaf.key in rc.coord.sessions:
                await asyncio.sleep(0.02)
        await deaf.close()
        again = await RawNode.connect(rc, PROFILE, identity)
        await rc.wait_connected(2, timeout_s=10.0)
        await asyncio.sleep(0.5)  # not dropped at once (was: 1006 on a poisoned session)
        assert rc.coord.sessions[again.key].abort_reason is None
        assert not again.ws.closed
        await again.close()
    store.close()


async def test_shutdown_is_fast_with_a_stalled_node(tmp_path: Path) -> None:
    """Stopping the coordinator with a node that stopped reading takes at most 5 s."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        node = await RawNode.connect(rc, PROFILE, Ed25519PrivateKey.generate())
        await rc.wait_connected(1, timeout_s=10.0)
        await stall(rc, node)
        t0 = time.monotonic()
        await asyncio.wait_for(rc.runner.cleanup(), 60.0)
        took = time.monotonic() - t0
        await node.close()
    assert took <= 5.0, took


async def test_coordinator_failure_blames_no_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job the coordinator itself cannot seal gives `coordinator-error` for that node
    (never `missing`, never a capacity strike); the round completes for the others."""
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    add_hash_references(store, PROFILE, 40)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        for _ in range(2):
            rc.start(rc.node(HashWorker(PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(2, timeout_s=10.0)
        victim = sorted(rc.coord.sessions)[0]
        s = rc.coord.sessions[victim]
        seal = s.transport.seal

        def failing_seal(msg: object) -> bytes:
            if isinstance(msg, Job):
                raise LocalProtocolError("counter exhausted (injected)")
            return seal(msg)  # type: ignore[arg-type]

        monkeypatch.setattr(s.transport, "seal", failing_seal)
        report = await asyncio.wait_for(run_round(rc.coord, PROFILE.name), 30.0)
        got = {o.node_key: o for o in report.outcomes}
        assert str(got[victim].verdict) == "coordinator-error"
        assert "injected" in got[victim].reason
        assert [str(o.verdict) for k, o in got.items() if k != victim] == ["pass"]
    store.close()
