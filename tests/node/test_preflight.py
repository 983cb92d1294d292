"""``netcheck node run`` asks the coordinator before the engine loads, so a wrong URL or
key shows within seconds (as an error; refusals are retried, docs/protocol.md §8.1)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from node_support import OFFLINE_URL, node_config

from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import running_coordinator, small_profile
from netcheck.node.app import run_node
from netcheck.node.workers import Worker

PROFILE = small_profile("preflight")
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "44" * 32}


class Loads:
    """A worker factory that records whether the engine was asked to load."""

    def __init__(self) -> None:
        self.called = False

    async def __call__(self, profile: object) -> Worker:
        self.called = True
        return MadeUpWorker(FP, PROFILE.max_new_tokens)


async def run_until_loaded(cfg: Path, loads: Loads) -> None:
    """Start ``run_node`` and cancel it once the worker factory was called."""
    task = asyncio.create_task(run_node(cfg, loads))
    for _ in range(200):
        if loads.called or task.done():
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("case", ["wrong-key", "wrong-url"])
async def test_wrong_key_or_url_is_reported_before_the_engine_loads(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong coordinator_key or a URL without /v1/ws is logged as an error naming the
    fix *before* "loading engine"; the refusal is not authenticated (protocol §8.1), so
    the node still loads and keeps retrying."""
    caplog.set_level(logging.INFO, logger="netcheck")
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        key = rc.identity.public_key()
        path = "/v1/ws"
        if case == "wrong-key":
            key = Ed25519PrivateKey.generate().public_key()
        else:
            path = "/ws"
        url = f"ws://127.0.0.1:{rc.port}{path}"
        cfg = node_config(tmp_path, url, public_key_text(key), name="n1")
        loads = Loads()
        await run_until_loaded(cfg, loads)
    assert loads.called
    lines = [r.getMessage() for r in caplog.records if r.name == "netcheck.node"]
    loading = next(i for i, m in enumerate(lines) if "loading engine" in m)
    errors = [i for i, r in enumerate(r for r in caplog.records if r.name == "netcheck.node")
              if r.levelno == logging.ERROR]  # fmt: skip
    assert errors and errors[0] < loading, lines
    first = lines[errors[0]]
    assert "Found before loading the engine" in first
    if case == "wrong-key":
        assert "WRONG_COORDINATOR_KEY" in first and public_key_text(key) in first
    else:
        assert f'set coordinator_url = "ws://127.0.0.1:{rc.port}/v1/ws"' in first


async def test_unreachable_coordinator_still_loads_the_engine(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A coordinator that is down may come up later: the node warns, loads and retries."""
    cfg = node_config(tmp_path, OFFLINE_URL, name="n1")
    caplog.set_level(logging.INFO, logger="netcheck")
    loads = Loads()
    await run_until_loaded(cfg, loads)
    assert loads.called
    assert "loading the engine anyway, the node keeps retrying" in caplog.text
