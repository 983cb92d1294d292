"""Sessions over real loopback websockets: admission, pinning, bad frames, admin API."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.errors import CloseCode
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import RunningCoordinator, running_coordinator, small_profile
from netcheck.lab.testing import raw_session as hand_session
from netcheck.node.client import NodeFatalError
from netcheck.protocol.messages import EchoReply, ProfileClaim

PROFILE = small_profile()
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}


def worker() -> MadeUpWorker:
    return MadeUpWorker(FP, PROFILE.max_new_tokens)


async def raw_session(rc: RunningCoordinator, identity: Ed25519PrivateKey):  # type: ignore[no-untyped-def]
    """Open a websocket and complete the handshake by hand; returns (http, ws, transport)."""
    claim = ProfileClaim(profile=PROFILE.name, fingerprint=FP, software="test")
    return await hand_session(rc, identity, claim)


async def test_allowed_node_joins(tmp_path: Path) -> None:
    """A node whose key is in the allowlist opens a session."""
    key = Ed25519PrivateKey.generate()
    async with running_coordinator(tmp_path, [PROFILE], allowed=[key]) as rc:
        rc.start(rc.node(worker(), PROFILE.name, key))
        await rc.wait_connected(1)
        session = next(iter(rc.coord.sessions.values()))
        assert session.claim.profile == PROFILE.name
        rtt = await session.measure_rtt(7, timeout_s=5.0)
        assert rtt is not None and rtt > 0


async def test_unknown_node_key_is_refused(tmp_path: Path) -> None:
    """A key outside the allowlist is closed with UNKNOWN_NODE_KEY; the node ends that
    attempt (a close code is not authenticated, so it retries later: test_forged_close)."""
    async with running_coordinator(
        tmp_path, [PROFILE], allowed=[Ed25519PrivateKey.generate()]
    ) as rc:
        client = rc.node(worker(), PROFILE.name)
        assert await client.run_session() is CloseCode.UNKNOWN_NODE_KEY
        assert (client.last_refusal or "").startswith("UNKNOWN_NODE_KEY")
        assert rc.coord.handshake_failures == 1
        assert not rc.coord.sessions


async def test_wrong_pinned_coordinator_key_is_refused(tmp_path: Path) -> None:
    """A node pinning another coordinator key never opens a session."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        client = rc.node(worker(), PROFILE.name, coordinator_key=Ed25519PrivateKey.generate())
        assert await client.run_session() is CloseCode.WRONG_COORDINATOR_KEY
        assert (client.last_refusal or "").startswith("WRONG_COORDINATOR_KEY")
        assert not rc.coord.sessions


async def test_unknown_profile_is_refused(tmp_path: Path) -> None:
    """A node claiming a profile the coordinator does not accept gets PROFILE_MISMATCH."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        client = rc.node(worker(), "no-such-profile")
        with pytest.raises(NodeFatalError, match="PROFILE_MISMATCH"):
            await client.run_session()


async def test_tampered_frame_closes_only_that_session(tmp_path: Path) -> None:
    """A bit flip in a frame closes that session with DECRYPT_FAILED; others keep going."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        rc.start(rc.node(worker(), PROFILE.name))
        await rc.wait_connected(1)
        http, ws, transport = await raw_session(rc, Ed25519PrivateKey.generate())
        try:
            await rc.wait_connected(2)
            frame = bytearray(transport.seal(EchoReply(nonce=1)))
            frame[-1] ^= 0x01
            await ws.send_bytes(bytes(frame))
            msg = await ws.receive(timeout=5.0)
            assert msg.type == aiohttp.WSMsgType.CLOSE
            assert ws.close_code == CloseCode.DECRYPT_FAILED
        finally:
            await ws.close()
            await http.close()
        await rc.wait_connected(1)
        survivor = next(iter(rc.coord.sessions.values()))
        assert await survivor.measure_rtt(9, timeout_s=5.0) is not None


async def test_replayed_frame_closes_session(tmp_path: Path) -> None:
    """Sending the same sealed frame twice closes the session with COUNTER_MISMATCH."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        http, ws, transport = await raw_session(rc, Ed25519PrivateKey.generate())
        try:
            frame = transport.seal(EchoReply(nonce=5))
            await ws.send_bytes(frame)
            await ws.send_bytes(frame)
            msg = await ws.receive(timeout=5.0)
            assert msg.type == aiohttp.WSMsgType.CLOSE
            assert ws.close_code == CloseCode.COUNTER_MISMATCH
        finally:
            await ws.close()
            await http.close()


async def test_silent_peer_times_out_in_handshake(tmp_path: Path) -> None:
    """A client that never sends hello is closed with HANDSHAKE_TIMEOUT."""
    async with (
        running_coordinator(tmp_path, [PROFILE], handshake_timeout_s=0.3) as rc,
        aiohttp.ClientSession() as http,
        http.ws_connect(rc.url) as ws,
    ):
        msg = await ws.receive(timeout=5.0)
        assert msg.type == aiohttp.WSMsgType.CLOSE
        assert ws.close_code == CloseCode.HANDSHAKE_TIMEOUT


async def test_admin_api_needs_the_token(tmp_path: Path) -> None:
    """The admin API refuses requests without the bearer token and accepts the right one."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/admin/status") as resp:
                assert resp.status == 401
            bad = {"Authorization": "Bearer wrong-token-wrong-token"}
            async with http.get(base + "/admin/status", headers=bad) as resp:
                assert resp.status == 401
            good = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
            async with http.get(base + "/admin/status", headers=good) as resp:
                assert resp.status == 200
                assert (await resp.json())["connected"] == 0


def test_ws_message_cap_is_the_largest_profile_frame() -> None:
    """The websocket cap follows the largest profile's result frame, not 8 MiB."""
    from netcheck.coordinator.server import FRAME_OVERHEAD_BYTES, ws_message_cap
    from netcheck.coordinator.session import receive_limits

    small, big = small_profile("s", batch_size=4), small_profile("b", batch_size=400)
    cap = ws_message_cap(8 << 20, [small, big])
    assert cap == receive_limits(big).max_message_bytes + FRAME_OVERHEAD_BYTES < 1 << 20
    assert ws_message_cap(8 << 20, [small]) < cap
    assert ws_message_cap(1000, [big]) == 2048 + FRAME_OVERHEAD_BYTES  # handshake floor


async def test_unauthenticated_message_above_the_cap_is_refused(tmp_path: Path) -> None:
    """Before any handshake, one byte over the cap closes with 1009 (not buffered up to
    8 MiB, which 60 idle connections turned into 0.5 GB of coordinator memory)."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        cap = rc.coord.ws_max_msg_size
        assert cap < 64 * 1024
        async with aiohttp.ClientSession() as http, http.ws_connect(rc.url) as ws:
            await ws.send_bytes(bytes(cap + 1))
            msg = await ws.receive(timeout=5.0)
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert ws.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
        assert rc.coord.sessions == {}
        for _ in range(50):  # counted (and logged) as a failed handshake, not a disconnect
            if rc.coord.handshake_failures == 1:
                break
            await asyncio.sleep(0.02)
        assert rc.coord.handshake_failures == 1


async def test_message_of_exactly_the_cap_reaches_netcheck(tmp_path: Path) -> None:
    """A message of exactly the cap (the largest legal frame) is not refused by the
    websocket layer (1009, off by one); here netcheck refuses it as a handshake: 4008."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        cap = rc.coord.ws_max_msg_size
        async with aiohttp.ClientSession() as http, http.ws_connect(rc.url) as ws:
            await ws.send_bytes(bytes(cap))
            msg = await ws.receive(timeout=5.0)
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert ws.close_code == CloseCode.MESSAGE_TOO_LARGE
