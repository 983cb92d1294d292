"""Helpers of the adversarial tests: a cheap test profile, a store with canaries, and a
hand-driven node session over a real loopback websocket."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import Profile
from netcheck.lab.testing import (
    RunningCoordinator,
    canary_store,
    small_profile,
)
from netcheck.lab.testing import raw_session as hand_session
from netcheck.protocol.messages import ProfileClaim
from netcheck.protocol.transport import Transport
from netcheck.storage import Store


def profile(**overrides: object) -> Profile:
    """A small LLM-workload profile; no engine is ever loaded by these tests."""
    fields: dict[str, object] = {"dispatch_timeout_s": 2.0, "result_timeout_s": 3.0}
    fields.update(overrides)
    return small_profile("adv", **fields)


FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}


def store_with_canaries(tmp_path: Path, prof: Profile, n: int = 32, **kw: object) -> Store:
    """A SQLite store holding ``n`` unspent canaries of ``prof`` for fingerprint FP."""
    answer = range(1, prof.max_new_tokens + 1)
    return canary_store(tmp_path / "netcheck.db", prof, FP, n, answer=answer, **kw)


async def raw_session(
    rc: RunningCoordinator,
    identity: Ed25519PrivateKey,
    prof_name: str = "adv",
    *,
    connector: aiohttp.BaseConnector | None = None,
) -> tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse, Transport]:
    """Open a websocket and complete the handshake by hand."""
    claim = ProfileClaim(profile=prof_name, fingerprint=FP, software="adv")
    return await hand_session(rc, identity, claim, connector=connector)


async def wait_for(cond, timeout_s: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    """Poll ``cond()`` until true or timeout; returns the last value."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while loop.time() < end:
        if cond():
            return True
        await asyncio.sleep(0.02)
    return bool(cond())
