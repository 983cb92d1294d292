"""Kernel receive timestamps on node connections (netcheck/coordinator/rxstamps.py;
docs/protocol.md "Timing"; docs/kernel-stamps.md)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import socket
import ssl
import struct
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID

from netcheck.coordinator import rxstamps
from netcheck.coordinator.arrivals import ArrivalStamps
from netcheck.coordinator.rxstamps import (
    SO_TIMESTAMPNS_NEW,
    SO_TIMESTAMPNS_OLD,
    ClockMap,
    KernelStampSite,
    StampingSocket,
    clock_offset_ns,
    enable_rx_timestamps,
    kernel_stamps_unsupported,
    parse_rx_timestamp,
)
from netcheck.lab.testing import (
    canary_store,
    raw_session,
    running_coordinator,
    small_profile,
    walk_raw_to_running,
)
from netcheck.protocol.jobs import commitment, sign_receipt
from netcheck.protocol.messages import ProfileClaim, Result

needs_kernel_stamps = pytest.mark.skipif(
    kernel_stamps_unsupported() is not None,
    reason=f"kernel receive stamps unavailable: {kernel_stamps_unsupported()}",
)

#: H200-sized results (240 x 32 token ids, ~31 KB frames), as in scripts/bench_timing.py.
PROFILE = small_profile(batch_size=240, max_new_tokens=32, result_timeout_s=10.0)
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}
#: The loop is blocked this long while the result arrives; the stamp must be within
#: STAMP_BOUND_NS of the node's write (generous: 2 loaded cores; typically < 1 ms).
BLOCK_S = 0.3
STAMP_BOUND_NS = 50_000_000


# -- parsing and clock conversion -------------------------------------------------------


def test_parse_rx_timestamp_reads_both_timespec_layouts_and_ignores_other_cmsgs() -> None:
    """The _NEW option's two int64 and the old native timespec both parse to ns; other
    levels/types and short data are ignored; no matching cmsg gives None."""
    new = struct.pack("=qq", 1_700_000_000, 123_456_789)
    old = struct.pack("@ll", 1_700_000_001, 5)
    other = (socket.IPPROTO_TCP, SO_TIMESTAMPNS_NEW, new)
    assert parse_rx_timestamp([other, (socket.SOL_SOCKET, SO_TIMESTAMPNS_NEW, new)],
                              SO_TIMESTAMPNS_NEW) == 1_700_000_000_123_456_789  # fmt: skip
    assert parse_rx_timestamp([(socket.SOL_SOCKET, SO_TIMESTAMPNS_OLD, old)],
                              SO_TIMESTAMPNS_OLD, "@ll") == 1_700_000_001_000_000_005  # fmt: skip
    assert parse_rx_timestamp([(socket.SOL_SOCKET, SO_TIMESTAMPNS_NEW, new[:8])], 64) is None
    assert parse_rx_timestamp([other], SO_TIMESTAMPNS_NEW) is None
    assert parse_rx_timestamp([], SO_TIMESTAMPNS_NEW) is None


class FakeClocks:
    """CLOCK_MONOTONIC advancing ``tick`` per read; CLOCK_REALTIME = monotonic + offset."""

    def __init__(self, offset: int, tick: int = 100) -> None:
        self.mono, self.offset, self.tick = 1_000_000_000, offset, tick

    def __call__(self, clock_id: int) -> int:
        self.mono += self.tick
        return self.mono + (self.offset if clock_id == time.CLOCK_REALTIME else 0)


def test_clock_offset_is_midpoint_of_the_back_to_back_reads() -> None:
    """Offset = realtime - midpoint of the two monotonic reads; error = half window."""
    offset, err = clock_offset_ns(clock=FakeClocks(5_000_000_000))
    assert offset == 5_000_000_000 and err == 100
    real_offset, real_err = clock_offset_ns()
    assert abs(time.time_ns() - time.monotonic_ns() - real_offset) < 5_000_000
    assert 0 <= real_err < 1_000_000


def test_clock_map_converts_and_quarantines_after_a_wall_clock_step() -> None:
    """A kernel stamp converts exactly; a stamp from the future is clamped (within 1 ms)
    or rejected; after the offset jumps (a step) conversions return None for the
    quarantine, then resume with the new offset."""
    clocks = FakeClocks(7_000_000_000)
    cmap = ClockMap(clock=clocks)
    now = clocks.mono
    assert cmap.to_monotonic(now - 5_000 + 7_000_000_000, now) == now - 5_000
    assert cmap.to_monotonic(now + 500_000 + 7_000_000_000, now) == now  # clamped
    assert cmap.to_monotonic(now + 9_000_000 + 7_000_000_000, now) is None
    clocks.offset += 1_000_000_000  # settimeofday one second forward
    now = clocks.mono
    assert cmap.to_monotonic(now + 8_000_000_000, now) is None and cmap.steps == 1
    later = now + rxstamps.STEP_QUARANTINE_NS + 1
    assert cmap.to_monotonic(later - 10 + 8_000_000_000, later) == later - 10


# -- a socket's kernel stamps -----------------------------------------------------------


@needs_kernel_stamps
def test_socket_read_carries_the_arrival_time_not_the_read_time() -> None:
    """40 KB written, read 200 ms later in several reads: the stamp is the write's time
    (within a few ms), not the read's; a read on which nothing carried a stamp (the
    option off) falls back to the read time with source ``read``."""
    with socket.create_server(("127.0.0.1", 0)) as lsock:
        client = socket.create_connection(lsock.getsockname())
        conn, _ = lsock.accept()
        sock = StampingSocket(conn.family, conn.type, conn.proto, fileno=conn.detach())
        with client, sock:
            enable_rx_timestamps(sock)
            sent = time.monotonic_ns()
            client.sendall(random.randbytes(40_000))
            time.sleep(0.2)
            got, buf = 0, bytearray(16_384)
            while got < 40_000:
                got += sock.recv_into(buf)  # the TLS (buffered protocol) path
                stamp, source = sock.arrival_ns(time.monotonic_ns())
                assert source == "kernel" and 0 <= stamp - sent < 20_000_000
            sock.setsockopt(socket.SOL_SOCKET, sock.cmsg_type, 0)
            client.sendall(b"x")
            assert sock.recv(10) == b"x" and sock.rx_realtime_ns is None
            now = time.monotonic_ns()
            assert sock.arrival_ns(now) == (now, "read")


# -- the site: plain, TLS, fallback -------------------------------------------------------


def _tls_contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    (tmp_path / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "k.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    client = ssl.create_default_context(cafile=str(tmp_path / "c.pem"))
    return server, client


async def _echo_stamps(
    tmp_path: Path, tls: bool, block_s: float, together: bool = False
) -> tuple[str, list[tuple[int | None, str, int]]]:
    """Serve a websocket endpoint with KernelStampSite; a client writes 3 messages, each
    followed by a block of the (shared) loop for ``block_s``, then lets the server read
    (unless ``together``: then the server reads all three after the last block).
    Returns the site's source and, per message, (stamp, its source, client write time)."""
    seen: list[tuple[int | None, str]] = []

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        stamps = ArrivalStamps()
        stamps.install(request, ws)
        async for msg in ws:
            seen.append((stamps.take(msg.data), stamps.last_source))
        return ws

    app = web.Application()
    app.router.add_get("/ws", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    server_ctx, client_ctx = _tls_contexts(tmp_path) if tls else (None, None)
    site = KernelStampSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    scheme, host = ("wss", "localhost") if tls else ("ws", "127.0.0.1")
    writes = []
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(f"{scheme}://{host}:{site.port}/ws", ssl=client_ctx or False) as ws,
        ):
            for i in range(3):
                writes.append(time.monotonic_ns())
                await ws.send_bytes(bytes([i]) * 30_000)
                time.sleep(block_s)  # blocks the server's loop too
                if not together:
                    await asyncio.sleep(0.05)  # the server reads now, block_s late
            for _ in range(250):
                if len(seen) == 3:
                    break
                await asyncio.sleep(0.02)
    finally:
        await runner.cleanup()
    return site.source, [(s, src, w) for (s, src), w in zip(seen, writes, strict=True)]


@needs_kernel_stamps
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_site_stamps_each_message_when_its_bytes_arrived(tmp_path: Path, tls: bool) -> None:
    """Over plain TCP and TLS, each of three messages read 200 ms after it was written
    (the loop blocked meanwhile) is stamped at its own write time (kernel), not when
    read."""
    source, rows = await _echo_stamps(tmp_path, tls, 0.2)
    assert source == "kernel" and len(rows) == 3
    for stamp, src, wrote in rows:
        assert src == "kernel" and stamp is not None
        assert 0 <= stamp - wrote < STAMP_BOUND_NS


@needs_kernel_stamps
async def test_messages_read_together_share_the_stamp_of_the_last_packet(
    tmp_path: Path,
) -> None:
    """The documented bound: three messages written 100 ms apart and read in one go
    (loop blocked throughout) all carry the third one's arrival: never earlier than
    their own write, and no later than the last bytes read with them."""
    source, rows = await _echo_stamps(tmp_path, False, 0.1, together=True)
    assert source == "kernel" and len(rows) == 3
    last_write = rows[-1][2]
    for stamp, src, wrote in rows:
        assert src == "kernel" and stamp is not None and stamp >= wrote
        assert 0 <= stamp - last_write < STAMP_BOUND_NS


async def test_site_falls_back_to_read_stamps_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the self-test fails the site serves with create_server, says so in the
    log, and the messages are stamped in the read callback (source ``read``)."""
    monkeypatch.setattr(rxstamps, "_support", "not Linux (test)")
    with caplog.at_level(logging.WARNING, logger="netcheck.coordinator"):
        source, rows = await _echo_stamps(tmp_path, False, 0.0)
    assert source == "read" and [src for _, src, _ in rows] == ["read"] * 3
    assert "kernel receive timestamps unavailable (not Linux (test))" in caplog.text


# -- the coordinator ------------------------------------------------------------------------


@needs_kernel_stamps
async def test_result_is_stamped_on_arrival_while_the_coordinator_loop_is_blocked(
    tmp_path: Path,
) -> None:
    """An H200-sized result written while the coordinator's event loop is blocked for
    300 ms is stamped (kernel source) within 50 ms of the node's write; the coordinator
    read it only after the block (before kernel stamps, the stamp was >= the block end)."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 4)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        identity = Ed25519PrivateKey.generate()
        claim = ProfileClaim(profile=PROFILE.name, fingerprint=FP, software="test")
        http, ws, transport = await raw_session(rc, identity, claim)
        try:
            await rc.wait_connected(1)
            (session,) = rc.coord.sessions.values()
            await walk_raw_to_running(session, ws, transport, "r1")  # a result needs it
            fut = session.expect_result("r1")
            outputs = tuple(tuple(random.randrange(128_256) for _ in range(32)) for _ in range(240))
            c = commitment(outputs)
            sig = sign_receipt(identity, transport.session_id, "r1", c)
            frame = transport.seal(Result(round_id="r1", outputs=outputs, commitment=c,
                                          signature=sig))  # fmt: skip
            assert len(frame) > 25_000
            wrote = time.monotonic_ns()
            await ws.send_bytes(frame)
            time.sleep(BLOCK_S)  # the one event loop, the coordinator's too, is blocked
            unblocked = time.monotonic_ns()
            arrival = await asyncio.wait_for(fut, 10)
        finally:
            await ws.close()
            await http.close()
    assert arrival.processed_ns is not None and arrival.processed_ns >= unblocked
    assert arrival.stamp_source == "kernel"
    assert 0 <= arrival.arrived_ns - wrote < STAMP_BOUND_NS
