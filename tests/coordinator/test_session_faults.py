"""Session faults over real loopback websockets: truncation mid-round and silent peers.

Each case checks the three promises of docs/protocol.md §9: the session ends, nothing
is recorded as a valid result, and the coordinator keeps serving its other nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.coordinator import rtt, server
from netcheck.coordinator.rounds import run_round
from netcheck.errors import CloseCode, ProtocolError
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import (
    RunningCoordinator,
    canary_store,
    running_coordinator,
    serve_until_release,
    small_profile,
)
from netcheck.lab.testing import raw_session as hand_session
from netcheck.protocol.jobs import commitment, sign_receipt
from netcheck.protocol.messages import EchoReply, ProfileClaim, Result
from netcheck.protocol.session import EXCESS_REPLY_BURST
from netcheck.storage import Store

PROFILE = small_profile(dispatch_timeout_s=1.0, result_timeout_s=3.0)
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}


def _store(tmp_path: Path) -> Store:
    """A store holding enough canaries for a few rounds of two nodes."""
    return canary_store(tmp_path / "netcheck.db", PROFILE, FP, 16, answer=(1, 2, 3, 4))


@contextlib.asynccontextmanager
async def _raw_session(  # type: ignore[no-untyped-def]
    rc: RunningCoordinator, identity: Ed25519PrivateKey, honest: bool = True
):
    """A session for ``identity`` whose handshake is completed by hand; with ``honest``,
    an honest node connected first. Yields (http, ws, transport) once the coordinator
    holds every session (2, or 1); the websocket and its HTTP client are closed on exit."""
    if honest:
        rc.start(rc.node(MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1, timeout_s=5.0)
    claim = ProfileClaim(profile=PROFILE.name, fingerprint=FP, software="test")
    http, ws, transport = await hand_session(rc, identity, claim)
    try:
        await rc.wait_connected(2 if honest else 1, timeout_s=5.0)
        yield http, ws, transport
    finally:
        await ws.close()
        await http.close()


def _assert_nothing_valid(store: Store, round_id: str, node_key: str) -> None:
    row = store.result_row(round_id, node_key)
    assert row is not None
    assert row["signature"] is None and row["commitment"] is None and row["outputs"] is None
    verdicts = {v["node_key"]: v for v in store.round_verdicts(round_id)}
    assert not verdicts[node_key]["passed"]


@pytest.mark.parametrize("cut", ["close_without_bye", "tcp_close", "partial_result_frame"])
async def test_truncation_mid_round(tmp_path: Path, cut: str) -> None:
    """A node cut off after release (no bye) is MISSING (it had acknowledged its job;
    the same for a node that leaves after its ack, docs/protocol.md §5.8), nothing
    valid is stored, and the coordinator finishes the round and keeps serving the other
    node."""
    identity = Ed25519PrivateKey.generate()
    node_key = public_key_text(identity)
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        async with _raw_session(rc, identity) as (http, ws, transport):
            round_task = asyncio.create_task(run_round(rc.coord, PROFILE.name))
            job, _release = await serve_until_release(ws, transport)
            if cut == "close_without_bye":
                await ws.close()
            elif cut == "tcp_close":
                await http.close()
            else:  # a signed result, cut in flight: half a frame, then the connection
                outputs = ((1, 2, 3, 4),) * job.batch_size
                digest = commitment(outputs)
                sig = sign_receipt(identity, transport.session_id, job.round_id, digest)
                frame = transport.seal(Result(job.round_id, outputs, digest, sig))
                await ws.send_bytes(frame[: len(frame) // 2])
                await http.close()
            report = await asyncio.wait_for(round_task, 8.0)
        verdicts = {o.node_key: str(o.verdict) for o in report.outcomes}
        assert verdicts[node_key] == "missing"
        assert len(verdicts) == 2  # the other node got a verdict too: it was served
        _assert_nothing_valid(rc.coord.store, report.round_id, node_key)
        await rc.wait_connected(1, timeout_s=2.0)
        assert node_key not in rc.coord.sessions
        survivor = next(iter(rc.coord.sessions.values()))
        assert await survivor.measure_rtt(11, timeout_s=2.0) is not None


async def test_silent_peer_in_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that completes the handshake, then never answers, is MISSING in the round
    (bounded by the echo and dispatch timeouts); the other node is served."""
    monkeypatch.setattr(rtt, "ECHO_TIMEOUT_S", 0.2)
    identity = Ed25519PrivateKey.generate()
    node_key = public_key_text(identity)
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        async with _raw_session(rc, identity):
            report = await asyncio.wait_for(run_round(rc.coord, PROFILE.name), 8.0)
        verdicts = {o.node_key: str(o.verdict) for o in report.outcomes}
        assert verdicts[node_key] == "missing"
        assert len(verdicts) == 2
        _assert_nothing_valid(rc.coord.store, report.round_id, node_key)


async def test_silent_peer_dropped_by_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peer that stops reading after the handshake (no pong) is dropped by the
    websocket heartbeat; the other node stays connected and answers."""
    monkeypatch.setattr(server, "HEARTBEAT_S", 0.3)
    identity = Ed25519PrivateKey.generate()
    node_key = public_key_text(identity)
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        # the raw session never reads again: no pong is sent
        async with _raw_session(rc, identity), asyncio.timeout(5.0):
            while node_key in rc.coord.sessions:
                await asyncio.sleep(0.05)
        assert len(rc.coord.sessions) == 1
        survivor = next(iter(rc.coord.sessions.values()))
        assert await survivor.measure_rtt(12, timeout_s=2.0) is not None


async def test_rtt_on_a_failed_session_returns_none(tmp_path: Path) -> None:
    """measure_rtt and probe_rtt return None, as documented, for a session the node's
    input already failed (not yet closed): nothing is sealed, nothing raised."""
    identity = Ed25519PrivateKey.generate()
    async with (
        running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc,
        _raw_session(rc, identity, honest=False),
    ):
        session = rc.coord.sessions[public_key_text(identity)]
        with pytest.raises(ProtocolError):  # what a refused frame from the node does
            session.protocol.refuse(CloseCode.UNEXPECTED_MESSAGE, "test")
        assert session.gone() and not session.closed.is_set()
        assert await session.measure_rtt(21, timeout_s=1.0) is None
        assert await session.probe_rtt(22, bytes(32), timeout_s=1.0) is None
        assert await session.measure_probe(23, bytes(32), timeout_s=1.0) is None


async def test_unsolicited_reply_flood_closes_rate_limited(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A node that floods echo replies nobody asked for is closed with RATE_LIMITED
    (4014) and one warning naming the count, after the burst; another node's session
    and echoes are untouched."""
    identity = Ed25519PrivateKey.generate()
    node_key = public_key_text(identity)
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        async with _raw_session(rc, identity) as (http, ws, transport):
            with caplog.at_level(logging.WARNING, logger="netcheck.coordinator"):
                for i in range(EXCESS_REPLY_BURST + 50):
                    await ws.send_bytes(transport.seal(EchoReply(1_000_000 + i)))
                while (msg := await ws.receive(timeout=5.0)).type != aiohttp.WSMsgType.CLOSE:
                    pass  # echoes of the keepalive, if any
            assert ws.close_code == CloseCode.RATE_LIMITED
            assert msg.extra == "rate_limited"
        async with asyncio.timeout(5.0):
            while node_key in rc.coord.sessions:
                await asyncio.sleep(0.02)
        lines = [r.getMessage() for r in caplog.records if "RATE_LIMITED" in r.getMessage()]
        assert len(lines) == 1 and "echo/probe replies beyond the requests sent" in lines[0]
        survivor = next(iter(rc.coord.sessions.values()))
        assert await survivor.measure_rtt(31, timeout_s=2.0) is not None


async def test_a_disconnect_leaves_no_unretrieved_waiter_exception() -> None:
    """A waiter its caller already gave up on (an echo past its timeout) is failed at the
    disconnect like the others, without asyncio's "Future exception was never retrieved"
    (seen at the end of a real-GPU screening run, session 15); a waiter still awaited
    gets :class:`NodeDisconnected`."""
    import gc
    import types

    from netcheck.coordinator.session import NodeSession
    from netcheck.coordinator.session_types import NodeDisconnected

    loop = asyncio.get_running_loop()
    unretrieved: list[str] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, ctx: unretrieved.append(str(ctx.get("message"))))
    try:
        fake = types.SimpleNamespace(
            closed_ns=None, closed=asyncio.Event(), node_key="ed25519:test",
            _acks={}, _results={}, _echoes={1: loop.create_future()},
            _probes={}, label="test",
        )  # fmt: skip
        awaited = loop.create_future()
        fake._results["r1"] = awaited
        NodeSession.fail_waiters(fake)  # type: ignore[arg-type]
        with pytest.raises(NodeDisconnected):
            await awaited
        del fake
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(old)
    assert not [m for m in unretrieved if "never retrieved" in m]
