"""What a node prints when the coordinator refuses it: unauthenticated refusals (close
codes, a forged welcome) are logged and retried; only the sealed profile refusal is final."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

import pytest
from aiohttp import WSMsgType, web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fake_coordinator_support import dial, node_endpoint

from netcheck.engines.fingerprint import fingerprint_id
from netcheck.errors import CloseCode
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import running_coordinator, small_profile
from netcheck.node.client import NodeFatalError, refusal_message
from netcheck.protocol.codec import encode_message
from netcheck.protocol.handshake import SUITE, VERSION
from netcheck.protocol.messages import Welcome

PROFILE = small_profile()
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}


def worker() -> MadeUpWorker:
    return MadeUpWorker(FP, PROFILE.max_new_tokens)


async def test_unknown_node_key_names_own_key_and_allowed_nodes(tmp_path: Path) -> None:
    """UNKNOWN_NODE_KEY prints this node's public key and says to add it to allowed_nodes."""
    async with running_coordinator(
        tmp_path, [PROFILE], allowed=[Ed25519PrivateKey.generate()]
    ) as rc:
        me = Ed25519PrivateKey.generate()
        client = rc.node(worker(), PROFILE.name, me)
        assert await client.run_session() is CloseCode.UNKNOWN_NODE_KEY
    text = client.last_refusal or ""
    assert text.startswith("UNKNOWN_NODE_KEY")
    assert public_key_text(me) in text
    assert "ask the operator to add it to allowed_nodes" in text


async def test_wrong_coordinator_key_names_the_pinned_key(tmp_path: Path) -> None:
    """The coordinator refusing our pinned key: the message shows the pinned coordinator_key."""
    other = Ed25519PrivateKey.generate()
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        client = rc.node(worker(), PROFILE.name, coordinator_key=other)
        assert await client.run_session() is CloseCode.WRONG_COORDINATOR_KEY
    text = client.last_refusal or ""
    assert text.startswith("WRONG_COORDINATOR_KEY")
    assert f"pinned as coordinator_key in the node config ({public_key_text(other)})" in text
    assert "refused" not in text.split(";")[0]  # not "coordinator refused this node"


async def test_impostor_welcome_shows_presented_key() -> None:
    """A server whose welcome names another key: the message shows pinned and presented key."""
    impostor = Ed25519PrivateKey.generate()

    async def forged_welcome(ws: web.WebSocketResponse) -> None:
        await ws.receive()  # hello
        welcome = Welcome(
            version=VERSION,
            suite=SUITE,
            ephemeral=os.urandom(32),
            nonce=os.urandom(32),
            coordinator_key=impostor.public_key().public_bytes_raw(),
            signature=bytes(64),
        )
        await ws.send_bytes(encode_message(welcome))
        msg = await ws.receive(timeout=5.0)
        assert msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.CLOSING)

    pinned = Ed25519PrivateKey.generate()
    async with node_endpoint(forged_welcome) as url:
        client = dial(url, worker(), PROFILE.name, pinned.public_key())
        assert await client.run_session() is CloseCode.WRONG_COORDINATOR_KEY
    text = client.last_refusal or ""
    assert text.startswith("WRONG_COORDINATOR_KEY")
    assert public_key_text(pinned) in text
    assert f"it presented {public_key_text(impostor)}" in text


async def test_profile_mismatch_names_the_claimed_profile(tmp_path: Path) -> None:
    """PROFILE_MISMATCH says the coordinator does not accept the named profile (or fingerprint)."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        with pytest.raises(NodeFatalError) as err:
            await rc.node(worker(), "no-such-profile").run_session()
    text = str(err.value)
    assert text.startswith("PROFILE_MISMATCH")
    assert "does not accept the claimed profile 'no-such-profile'" in text
    assert fingerprint_id(FP)[:12] in text
    # The coordinator's close reason lists what it accepts (the node is authenticated).
    assert f"(the coordinator said: profile_mismatch: accepted profiles {PROFILE.name})" in text


def test_refusal_message_without_presented_key() -> None:
    """Without a presented key the message says the server did not name its own."""
    text = refusal_message(
        CloseCode.WRONG_COORDINATOR_KEY,
        url="ws://h:1/v1/ws",
        pinned_key="ed25519:P",
        node_key="ed25519:N",
        profile="p",
    )
    assert "(ed25519:P)" in text and "without naming its own" in text
    assert "ed25519:N" not in text


async def test_superseded_session_says_another_process_holds_the_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two node processes with one key: the one superseded logs a warning that another
    process probably uses its key, naming the key and the fix (one process per key)."""
    me = Ed25519PrivateKey.generate()
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        first = asyncio.create_task(rc.node(worker(), PROFILE.name, me, label="a").run_session())
        await rc.wait_connected(1, timeout_s=10.0)
        second = asyncio.create_task(rc.node(worker(), PROFILE.name, me, label="b").run_session())
        try:
            with caplog.at_level(logging.WARNING):
                assert await asyncio.wait_for(first, 10.0) is CloseCode.SUPERSEDED
        finally:
            second.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await second
    hints = [r.getMessage() for r in caplog.records if "SUPERSEDED:" in r.getMessage()]
    assert len(hints) == 1 and hints[0].startswith("a: SUPERSEDED: the coordinator at ")
    assert public_key_text(me) in hints[0]
    assert "another node process" in hints[0] and "same identity_key" in hints[0]
    assert "Run one node process per key" in hints[0]
