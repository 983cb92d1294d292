"""``netcheck node run`` checks the coordinator URL and key before the engine loads."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.keys import generate_key, public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import running_coordinator, small_profile
from netcheck.node.app import run_node
from netcheck.node.client import NodeFatalError
from netcheck.node.workers import Worker

PROFILE = small_profile("preflight")
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "44" * 32}


def node_config(tmp_path: Path, url: str, coordinator_key: str) -> Path:
    generate_key(tmp_path / "node.pem")
    cfg = tmp_path / "node.toml"
    cfg.write_text(
        f'coordinator_url = "{url}"\ncoordinator_key = "{coordinator_key}"\n'
        'identity_key = "node.pem"\nprofile = "cpu-tiny"\nname = "n1"\n'
    )
    return cfg


class Loads:
    """A worker factory that records whether the engine was asked to load."""

    def __init__(self) -> None:
        self.called = False

    async def __call__(self, profile: object) -> Worker:
        self.called = True
        return MadeUpWorker(FP, PROFILE.max_new_tokens)


@pytest.mark.parametrize("case", ["wrong-key", "wrong-url"])
async def test_wrong_key_or_url_stops_the_node_before_the_engine_loads(
    tmp_path: Path, case: str
) -> None:
    """A wrong coordinator_key or a URL without /v1/ws: NodeFatalError, engine never loaded."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        key = rc.identity.public_key()
        path = "/v1/ws"
        if case == "wrong-key":
            key = Ed25519PrivateKey.generate().public_key()
        else:
            path = "/ws"
        cfg = node_config(tmp_path, f"ws://127.0.0.1:{rc.port}{path}", public_key_text(key))
        loads = Loads()
        with pytest.raises(NodeFatalError) as err:
            await asyncio.wait_for(run_node(cfg, loads), 20)
    assert not loads.called
    text = str(err.value)
    if case == "wrong-key":
        assert text.startswith("WRONG_COORDINATOR_KEY")
    else:
        assert 'set coordinator_url = "ws://127.0.0.1:' in text and "/v1/ws" in text


async def test_unreachable_coordinator_still_loads_the_engine(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A coordinator that is down may come up later: the node warns, loads and retries."""
    cfg = node_config(tmp_path, "ws://127.0.0.1:1/v1/ws", public_key_text(generate_key(
        tmp_path / "coord.pem")))  # fmt: skip
    caplog.set_level(logging.INFO, logger="netcheck")
    loads = Loads()
    task = asyncio.create_task(run_node(cfg, loads))
    for _ in range(100):
        if loads.called:
            break
        await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loads.called
    assert "loading the engine anyway, the node keeps retrying" in caplog.text
