"""A websocket text message is PROTOCOL_ERROR (4000) at every stage, on both sides:
every netcheck/1 message is binary (docs/protocol.md §1.1, §8.1)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fake_coordinator_support import dial, node_endpoint

from netcheck.errors import CloseCode
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import raw_session, running_coordinator, small_profile
from netcheck.protocol.messages import ProfileClaim

PROFILE = small_profile("text")
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "77" * 32}
CLAIM = ProfileClaim(PROFILE.name, FP, "netcheck/test")


async def test_text_message_in_place_of_hello_is_protocol_error(tmp_path: Path) -> None:
    """The coordinator closes a text message during the handshake with 4000 (was 4001)."""
    async with (
        running_coordinator(tmp_path, [PROFILE]) as rc,
        aiohttp.ClientSession() as http,
        http.ws_connect(rc.url) as ws,
    ):
        await ws.send_str("hello")
        msg = await ws.receive(timeout=5.0)
    assert msg.type is aiohttp.WSMsgType.CLOSE
    assert ws.close_code == CloseCode.PROTOCOL_ERROR


async def test_text_message_after_the_handshake_is_protocol_error(tmp_path: Path) -> None:
    """After the handshake too: 4000."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        http, ws, _ = await raw_session(rc, Ed25519PrivateKey.generate(), CLAIM)
        try:
            await rc.wait_connected(1)
            await ws.send_str("echo")
            while (await ws.receive(timeout=5.0)).type is aiohttp.WSMsgType.BINARY:
                pass  # an echo or probe may come first
            assert ws.close_code == CloseCode.PROTOCOL_ERROR
        finally:
            await ws.close()
            await http.close()


async def test_node_closes_a_text_welcome_with_protocol_error() -> None:
    """The node answers a text message in place of welcome with 4000 (it used to drop
    the connection without a code)."""
    codes: list[int | None] = []

    async def text_welcome(ws: web.WebSocketResponse) -> None:
        await ws.receive()  # hello
        await ws.send_str("welcome")
        await ws.receive(timeout=5.0)
        codes.append(ws.close_code)

    async with node_endpoint(text_welcome) as url:
        client = dial(url, MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name)
        assert await client.run_session() is CloseCode.PROTOCOL_ERROR
        async with asyncio.timeout(5):
            while not codes:
                await asyncio.sleep(0.01)
    assert codes == [CloseCode.PROTOCOL_ERROR]
