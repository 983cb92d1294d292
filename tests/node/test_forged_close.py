"""Close codes are not authenticated (docs/protocol.md §8.1): a close frame forged by a
middlebox or any party on the path must not stop a node for good. Only a refusal that
arrived inside the authenticated session (a sealed ``bye``) is final."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from fake_coordinator_support import dial, node_endpoint

import netcheck.node.client as client_mod
from netcheck.errors import CloseCode
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import running_coordinator, small_profile
from netcheck.node.client import NodeClient, NodeFatalError

PROFILE = small_profile()
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}
REFUSALS = [CloseCode.UNKNOWN_NODE_KEY, CloseCode.WRONG_COORDINATOR_KEY, CloseCode.PROFILE_MISMATCH]


@contextlib.asynccontextmanager
async def forger(code: int, after_hello: bool = True) -> AsyncIterator[tuple[str, list[int]]]:
    """A server on the node endpoint that answers every upgrade with a forged close
    ``code`` (after reading ``hello`` if ``after_hello``); yields (url, attempts)."""
    attempts: list[int] = []

    async def script(ws: web.WebSocketResponse) -> None:
        attempts.append(code)
        if after_hello:
            await ws.receive(timeout=5.0)
        await ws.close(code=code, message=CloseCode(code).name.lower().encode())

    async with node_endpoint(script) as url:
        yield url, attempts


def node(url: str) -> NodeClient:
    return dial(url, MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name)


@pytest.mark.parametrize("code", REFUSALS, ids=lambda c: c.name)
async def test_forged_refusal_is_not_fatal(
    code: CloseCode, caplog: pytest.LogCaptureFixture
) -> None:
    """A forged 4002/4003/4017 ends the attempt (the refusal is logged as an error with
    what to check) but raises no NodeFatalError."""
    async with forger(code) as (url, _):
        client = node(url)
        with caplog.at_level(logging.ERROR, logger="netcheck.node"):
            got = await client.run_session()
    assert got is code
    assert client.last_refusal is not None and client.last_refusal.startswith(code.name)
    assert "retrying" in caplog.text


async def test_node_keeps_retrying_through_forged_refusals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run_forever reconnects (with the slower refusal backoff) after forged closes
    instead of exiting; here 3 attempts, each refused with a forged 4017."""
    monkeypatch.setattr(client_mod, "REFUSAL_BACKOFF_S", (0.01, 0.02))
    async with forger(CloseCode.PROFILE_MISMATCH) as (url, attempts):
        stop = asyncio.Event()
        task = asyncio.create_task(node(url).run_forever(stop))
        async with asyncio.timeout(20):
            while len(attempts) < 3 and not task.done():
                await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(task, 10)  # raises NodeFatalError if it gave up
    assert len(attempts) >= 3


async def test_refusal_backoff_is_slower_than_the_reconnect_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a refusal the next dial waits at least REFUSAL_BACKOFF_S[0] (jittered by
    at most half): a refused node does not hammer the coordinator every 0.5 s."""
    waits: list[float] = []
    real_wait_for = asyncio.wait_for

    async def spy(aw: object, timeout: float | None) -> object:
        if timeout == client_mod.HANDSHAKE_TIMEOUT_S:
            return await real_wait_for(aw, timeout)  # type: ignore[arg-type]
        waits.append(timeout or 0.0)  # the backoff wait: record it, do not sleep it
        stop.set()
        return await real_wait_for(aw, 0.01)  # type: ignore[arg-type]

    async with forger(CloseCode.UNKNOWN_NODE_KEY) as (url, _):
        stop = asyncio.Event()
        monkeypatch.setattr(client_mod.asyncio, "wait_for", spy)
        await real_wait_for(node(url).run_forever(stop), 20)
    assert waits and waits[0] >= client_mod.REFUSAL_BACKOFF_S[0] * 0.5


async def test_authenticated_profile_refusal_is_final(tmp_path: Path) -> None:
    """The real coordinator refuses an unknown profile inside the session (sealed bye)
    before closing 4017: that refusal is final and says what the coordinator accepts."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        client = rc.node(MadeUpWorker(FP, PROFILE.max_new_tokens), "no-such-profile")
        with pytest.raises(NodeFatalError) as err:
            await client.run_session()
    assert str(err.value).startswith("PROFILE_MISMATCH")
    assert f"accepted profiles {PROFILE.name}" in str(err.value)
