"""Arrival stamps taken where a websocket message completes, and frames opened off the
event loop (netcheck/coordinator/arrivals.py; docs/protocol.md "Timing")."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import ClientSession, web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.coordinator.arrivals import ArrivalStamps, FrameOpener, open_frame
from netcheck.errors import CloseCode, FrameError, MessageError
from netcheck.keys import public_key_bytes
from netcheck.protocol.jobs import commitment, sign_receipt
from netcheck.protocol.messages import Ack, EchoReply, Job, Release, Result
from netcheck.protocol.session import Session
from netcheck.protocol.states import Role
from netcheck.protocol.transport import Transport

K1, K2, SID = bytes(range(32)), bytes(range(32, 64)), bytes(range(16))


async def _stamped_server(busy_s: float) -> tuple[list[tuple[int | None, int]], str, web.AppRunner]:
    """A websocket endpoint whose reader is slow (``busy_s`` of blocking work per
    message, like decoding on the loop): returns (stamp, reader time) per message."""
    seen: list[tuple[int | None, int]] = []

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        stamps = ArrivalStamps()
        assert stamps.install(request, ws), "aiohttp internals changed: stamps not installed"
        async for msg in ws:
            seen.append((stamps.take(msg.data), time.monotonic_ns()))
            time.sleep(busy_s)  # blocks the loop, as a decode on it would
        return ws

    app = web.Application()
    app.router.add_get("/ws", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return seen, f"ws://127.0.0.1:{port}/ws", runner


async def test_stamp_is_taken_when_bytes_arrive_not_when_the_reader_gets_to_them():
    """Five messages written at once to a reader that blocks 30 ms per message: each
    is stamped on arrival (all within a few ms), though the reader sees the last one
    ~120 ms later; the old stamp-in-the-reader would have spread them by 120 ms."""
    seen, url, runner = await _stamped_server(0.03)
    try:
        async with ClientSession() as http, http.ws_connect(url) as ws:
            for i in range(5):
                await ws.send_bytes(bytes([i]) * 1000)
            sent_ns = time.monotonic_ns()
            for _ in range(200):
                if len(seen) == 5:
                    break
                await asyncio.sleep(0.02)
    finally:
        await runner.cleanup()
    assert len(seen) == 5 and all(s is not None for s, _ in seen)
    stamps = [s for s, _ in seen if s is not None]
    reader_spread = seen[-1][1] - seen[0][1]
    assert reader_spread > 100e6  # the reader really was behind
    assert max(stamps) - min(stamps) < reader_spread / 4
    assert max(stamps) <= seen[-1][1] and min(stamps) >= sent_ns - 1e9


def test_take_without_a_stamp_returns_none_and_keeps_later_stamps():
    """A message parsed outside the wrapped path has no stamp; the stamps of messages
    after it stay matched to them."""
    stamps = ArrivalStamps()
    a, b = b"a" * 10, b"b" * 10
    stamps._pending.extend([(b, 42, "read")])
    assert stamps.take(a) is None and stamps.missed == 1
    assert stamps.take(b) == 42


def _pair() -> tuple[Transport, Transport]:
    return Transport(Role.NODE, K1, K2, SID), Transport(Role.COORDINATOR, K2, K1, SID)


def _result(
    key: Ed25519PrivateKey, outputs: tuple[tuple[int, ...], ...], round_id: str = "r1"
) -> Result:
    c = commitment(outputs)
    signature = sign_receipt(key, SID, round_id, c)
    return Result(round_id=round_id, outputs=outputs, commitment=c, signature=signature)


async def test_opener_checks_results_in_the_pool_and_small_frames_inline():
    """A large result is opened in a worker thread with its commitment and receipt
    checked; a wrong signature shows as signature_ok False; small frames open inline;
    a corrupted frame raises the transport's error."""
    key = Ed25519PrivateKey.generate()
    node, coord = _pair()
    opener = FrameOpener(workers=1, inline_bytes=100)
    session = Session(Role.COORDINATOR, coord)
    try:
        outputs = tuple(tuple(range(i, i + 64)) for i in range(16))
        _released(session, "r1", "r2")
        good = await opener.open(session, node.seal(_result(key, outputs)), public_key_bytes(key))
        assert isinstance(good.message, Result)
        assert good.commitment_ok and good.signature_ok and opener._executor is not None
        other = Ed25519PrivateKey.generate()
        bad = await opener.open(
            session, node.seal(_result(other, outputs, "r2")), public_key_bytes(key)
        )
        assert bad.commitment_ok and bad.signature_ok is False
        small = await opener.open(session, node.seal(EchoReply(nonce=7)), public_key_bytes(key))
        assert small.message == EchoReply(nonce=7) and small.signature_ok is None
        frame = bytearray(node.seal(EchoReply(nonce=8)))
        frame[-1] ^= 1
        with pytest.raises(FrameError):
            open_frame(coord, bytes(frame), public_key_bytes(key))
    finally:
        opener.close()


def _released(session: Session, *round_ids: str) -> None:
    """Walk ``session`` (coordinator) to RUNNING for each round: job, ack, release."""
    for r in round_ids:
        session.send(Job(r, bytes(12), b"x" * 32, 4, 4, 1.0))
        session.receive_message(Ack(r))
        session.send(Release(r, bytes(32)))


async def test_process_opener_gives_what_the_thread_opener_gives():
    """A process-pool opener returns the same opened result and checks as the thread
    pool, and a result out of order still closes UNEXPECTED_MESSAGE after opening."""
    key = Ed25519PrivateKey.generate()
    outputs = tuple(tuple(range(i, i + 64)) for i in range(16))
    got = []
    for kind in ("thread", "process"):
        node, coord = _pair()
        session = Session(Role.COORDINATOR, coord)
        opener = FrameOpener(workers=1, inline_bytes=100, kind=kind)
        try:
            _released(session, "r1")
            opened = await opener.open(
                session, node.seal(_result(key, outputs)), public_key_bytes(key)
            )
            got.append((opened.message, opened.commitment_ok, opened.signature_ok))
            with pytest.raises(MessageError) as err:  # r1 is over: a second result
                await opener.open(session, node.seal(_result(key, outputs)), public_key_bytes(key))
            assert err.value.code is CloseCode.UNEXPECTED_MESSAGE
        finally:
            opener.close()
    assert got[0] == got[1] and got[0][1:] == (True, True)
