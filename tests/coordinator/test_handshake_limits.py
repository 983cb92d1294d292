"""Handshake limits over real loopback websockets (issue #12 item 2, docs/protocol.md §3.3b).

The coordinator's limiter clock is frozen in each test, so no bucket refills while the
test runs, however slowly the machine goes: what passes is admitted by design, not by
the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.coordinator.limits import SOURCE_FAILURES_PER_MINUTE, parse_networks
from netcheck.errors import CloseCode
from netcheck.keys import public_key_text
from netcheck.lab.testing import RunningCoordinator, running_coordinator, small_profile
from netcheck.lab.testing import raw_session as hand_session
from netcheck.protocol.handshake import NodeHandshake
from netcheck.protocol.messages import ProfileClaim

PROFILE = small_profile()
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}
CLAIM = ProfileClaim(profile=PROFILE.name, fingerprint=FP, software="test")
FLOOD = SOURCE_FAILURES_PER_MINUTE + 30


async def bare_upgrades(
    rc: RunningCoordinator, n: int, headers: dict[str, str] | None = None
) -> None:
    """``n`` websocket upgrades that close without a handshake message, ``n // 10`` at a time."""
    async with aiohttp.ClientSession() as http:

        async def one() -> None:
            async with http.ws_connect(rc.url, headers=headers):
                pass

        for start in range(0, n, 10):
            await asyncio.gather(*(one() for _ in range(min(10, n - start))))


async def until_drained(rc: RunningCoordinator, source: str) -> None:
    """Wait (bounded) until the server has charged the flood to ``source``."""
    async with asyncio.timeout(20):
        while not rc.coord.limiter.sources.empty(source, rc.coord.limit_clock()):
            await asyncio.sleep(0.02)


async def joins(rc: RunningCoordinator, key: Ed25519PrivateKey) -> bool:
    """True if ``key`` completes a handshake and is registered (then closes it)."""
    http, ws, _ = await hand_session(rc, key, CLAIM)
    try:
        text = public_key_text(key)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                while text not in rc.coord.sessions:
                    await asyncio.sleep(0.02)
        return text in rc.coord.sessions
    finally:
        await ws.close()
        await http.close()


async def refused_code(rc: RunningCoordinator, key: Ed25519PrivateKey) -> int | None:
    """The close code a handshake of ``key`` gets (None if it joins)."""
    async with aiohttp.ClientSession() as http, http.ws_connect(rc.url, compress=0) as ws:
        hs = NodeHandshake(key, rc.identity.public_key(), CLAIM)
        await ws.send_bytes(hs.start())
        msg = await ws.receive(timeout=10)
        if msg.type is aiohttp.WSMsgType.BINARY:
            await ws.send_bytes(hs.receive_welcome(msg.data))
            msg = await ws.receive(timeout=10)
        return ws.close_code if msg.type is not aiohttp.WSMsgType.BINARY else None


async def test_bare_upgrades_from_the_same_address_do_not_lock_out_an_allowed_node(
    tmp_path: Path,
) -> None:
    """(a) A flood of bare upgrades past the source budget; the listed node still joins."""
    key = Ed25519PrivateKey.generate()
    async with running_coordinator(tmp_path, [PROFILE], allowed=[key]) as rc:
        rc.coord.limit_clock = lambda: 1000.0
        await bare_upgrades(rc, FLOOD)
        await until_drained(rc, "127.0.0.1")
        assert await joins(rc, key)
        # The source is still limited for what proves no admitted key.
        stranger = Ed25519PrivateKey.generate()
        assert await refused_code(rc, stranger) == CloseCode.RATE_LIMITED


async def test_open_enrollment_known_key_survives_a_flood_but_a_new_key_does_not(
    tmp_path: Path,
) -> None:
    """(a) Under open enrollment a key seen before still joins; a fresh key is limited."""
    key = Ed25519PrivateKey.generate()
    async with running_coordinator(tmp_path, [PROFILE], open_enrollment=True) as rc:
        rc.coord.limit_clock = lambda: 1000.0
        assert await joins(rc, key)  # known from now on
        await bare_upgrades(rc, FLOOD)
        await until_drained(rc, "127.0.0.1")
        assert await joins(rc, key)
        assert await refused_code(rc, Ed25519PrivateKey.generate()) == CloseCode.RATE_LIMITED


async def test_many_allowed_nodes_behind_one_address_all_join_at_once(tmp_path: Path) -> None:
    """(b) 150 listed nodes share one address (a proxy) and reconnect together: all join."""
    keys = [Ed25519PrivateKey.generate() for _ in range(SOURCE_FAILURES_PER_MINUTE + 30)]
    async with running_coordinator(tmp_path, [PROFILE], allowed=keys) as rc:
        rc.coord.limit_clock = lambda: 1000.0
        sessions = await asyncio.gather(*(hand_session(rc, k, CLAIM) for k in keys))
        try:
            async with asyncio.timeout(30):
                while len(rc.coord.sessions) < len(keys) and not any(
                    ws.closed for _, ws, _ in sessions
                ):
                    await asyncio.sleep(0.05)
            assert len(rc.coord.sessions) == len(keys)
        finally:
            for http, ws, _ in sessions:
                await ws.close()
                await http.close()


async def test_trusted_proxy_charges_the_forwarded_client_not_the_proxy(tmp_path: Path) -> None:
    """Behind a trusted proxy each forwarded client has its own budget; the proxy has none."""
    key = Ed25519PrivateKey.generate()
    async with running_coordinator(tmp_path, [PROFILE], allowed=[key]) as rc:
        rc.coord.limit_clock = lambda: 1000.0
        rc.coord.trusted_proxies = parse_networks(["127.0.0.0/8"])
        await bare_upgrades(rc, FLOOD, headers={"X-Forwarded-For": "203.0.113.7"})
        await until_drained(rc, "203.0.113.7")
        assert "127.0.0.1" not in rc.coord.limiter.sources  # the proxy itself is not charged
        assert not rc.coord.limiter.sources.empty("198.51.100.2", rc.coord.limit_clock())
