"""Session caps (docs/protocol.md §3.3c): the pure slot table, and real loopback sockets.

Sessions are raw handshakes (``raw_session``) that stay open; a second source is faked
with ``X-Forwarded-For`` from a trusted proxy (loopback), as in test_handshake_limits.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from netcheck.config import CoordinatorConfig
from netcheck.coordinator.limits import SessionSlots, parse_networks
from netcheck.errors import CloseCode
from netcheck.lab.testing import RunningCoordinator, raw_session, running_coordinator, small_profile
from netcheck.protocol.messages import ProfileClaim

PROFILE = small_profile()
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}
CLAIM = ProfileClaim(profile=PROFILE.name, fingerprint=FP, software="test")


def test_slots_refuse_per_source_then_total_and_free_on_release() -> None:
    slots = SessionSlots(max_total=3, max_per_source=2)
    assert slots.acquire("a") is None and slots.acquire("a") is None
    refusal = slots.acquire("a")
    assert refusal is not None and (refusal.scope, refusal.limit, refusal.first) == (
        "source",
        2,
        True,
    )
    again = slots.acquire("a")
    assert again is not None and not again.first  # one WARNING per flood
    assert slots.acquire("b") is None  # another source still gets in
    total = slots.acquire("c")
    assert total is not None and (total.scope, total.limit) == ("total", 3)
    assert (slots.total, slots.refused) == (3, 3)
    slots.release("a")
    assert slots.held("a") == 1 and slots.acquire("c") is None
    slots.release("b")
    slots.release("c")
    slots.release("a")
    assert slots.total == 0 and slots.held("a") == 0
    with pytest.raises(ValueError, match="holds no session slot"):
        slots.release("a")


def test_limits_below_one_are_refused_naming_the_field(tmp_path: Path) -> None:
    base = {"identity_key": tmp_path / "k.pem", "admin_token": "x" * 24,
            "profiles": ["cpu-tiny"], "open_enrollment": True}  # fmt: skip
    for field in ("max_sessions", "max_sessions_per_source"):
        with pytest.raises(ValidationError, match=field):
            CoordinatorConfig(**base, **{field: 0})  # type: ignore[arg-type]


async def open_sessions(
    rc: RunningCoordinator, n: int, source: str | None = None
) -> list[tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse]]:
    """``n`` raw sessions left open (handshake sent; some may be registered)."""
    out = []
    for _ in range(n):
        http = aiohttp.ClientSession(headers={"X-Forwarded-For": source} if source else None)
        out.append((http, await http.ws_connect(rc.url, compress=0)))
    return out


async def close_all(
    opened: list[tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse]],
) -> None:
    for http, ws in opened:
        await ws.close()
        await http.close()


async def refused_with(rc: RunningCoordinator, source: str | None = None) -> int | None:
    """Close code of one more upgrade that sends nothing (None: still open after 1 s)."""
    headers = {"X-Forwarded-For": source} if source else None
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.ws_connect(rc.url, compress=0) as ws,
    ):
        try:
            msg = await ws.receive(timeout=1)
        except TimeoutError:
            return None
        return ws.close_code if msg.type is aiohttp.WSMsgType.CLOSE else None


async def joins(rc: RunningCoordinator, source: str) -> bool:
    """A fresh key from ``source`` completes a handshake and is registered (then closes)."""
    key = Ed25519PrivateKey.generate()
    before = len(rc.coord.sessions)
    http, ws, _ = await raw_session(rc, key, CLAIM, headers={"X-Forwarded-For": source})
    try:
        async with asyncio.timeout(10):
            while len(rc.coord.sessions) <= before and not ws.closed:
                await asyncio.sleep(0.02)
        return len(rc.coord.sessions) > before
    finally:
        await ws.close()
        await http.close()


async def test_the_source_cap_refuses_the_next_session_and_frees_on_close(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A source at max_sessions_per_source: the next upgrade gets 1013 (logged once),
    another source still joins, and a closed session frees its slot."""
    # open enrollment; the held sessions send nothing and must not time out meanwhile
    async with running_coordinator(tmp_path, [PROFILE], handshake_timeout_s=30) as rc:
        rc.coord.trusted_proxies = parse_networks(["127.0.0.0/8"])
        rc.coord.slots = SessionSlots(max_total=100, max_per_source=3)
        held = await open_sessions(rc, 3, "203.0.113.7")
        try:
            async with asyncio.timeout(10):
                while rc.coord.slots.total < 3:
                    await asyncio.sleep(0.02)
            with caplog.at_level(logging.WARNING, "netcheck.coordinator"):
                assert await refused_with(rc, "203.0.113.7") == CloseCode.TRY_AGAIN_LATER
                assert await refused_with(rc, "203.0.113.7") == CloseCode.TRY_AGAIN_LATER
            warned = [r for r in caplog.records if "max_sessions_per_source = 3" in r.message]
            assert len(warned) == 1 and "203.0.113.7" in warned[0].message
            assert rc.coord.slots.refused == 2
            assert await joins(rc, "198.51.100.2")  # another source is still admitted
            await close_all(held[:1])
            async with asyncio.timeout(10):  # the closed session gave its slot back
                while rc.coord.slots.held("203.0.113.7") > 2:
                    await asyncio.sleep(0.02)
            assert await refused_with(rc, "203.0.113.7") is None  # admitted, left open
        finally:
            await close_all(held)


async def test_the_total_cap_refuses_before_the_handshake_and_frees_on_close(
    tmp_path: Path,
) -> None:
    """Two joined nodes fill max_sessions = 2: the next upgrade gets 1013 before any
    handshake work; once one node closes, a new node joins."""
    keys = [Ed25519PrivateKey.generate() for _ in range(2)]
    async with running_coordinator(tmp_path, [PROFILE], handshake_timeout_s=30) as rc:
        rc.coord.slots = SessionSlots(max_total=2, max_per_source=100)
        sessions = [await raw_session(rc, k, CLAIM) for k in keys]
        try:
            async with asyncio.timeout(10):
                while len(rc.coord.sessions) < 2:
                    await asyncio.sleep(0.02)
            assert await refused_with(rc) == CloseCode.TRY_AGAIN_LATER
            assert rc.coord.handshake_failures == 0  # refused before any handshake work
            assert rc.coord.slots.refused == 1
            http, ws, _ = sessions.pop()
            await ws.close()
            await http.close()
            async with asyncio.timeout(10):
                while rc.coord.slots.total > 1:
                    await asyncio.sleep(0.02)
            sessions.append(await raw_session(rc, Ed25519PrivateKey.generate(), CLAIM))
            async with asyncio.timeout(10):
                while len(rc.coord.sessions) < 2:
                    await asyncio.sleep(0.02)
        finally:
            for http, ws, _ in sessions:
                await ws.close()
                await http.close()
