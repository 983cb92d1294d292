"""A node started against a URL that is not the node endpoint stops with a clear error,
and a starting node says who it is and what it loads."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from fake_coordinator_support import dial
from node_support import node_config, overloaded_endpoint

from netcheck.keys import load_private_key, public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import running_coordinator, small_profile
from netcheck.node.app import run_node
from netcheck.node.client import NodeClient, not_an_endpoint
from netcheck.node.workers import Worker

PROFILE = small_profile("start")
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "33" * 32}


@pytest.mark.parametrize("path", ["/", "", "/v1", "/dashboard/nodes"])
async def test_url_without_ws_path_names_the_fix_and_is_retried(tmp_path: Path, path: str) -> None:
    """The coordinator's own pages (redirects, 200, 404) are logged as an error with the
    corrected URL; an HTTP answer is not authenticated (a proxy or middlebox can send
    one), so the node retries with the refusal backoff instead of exiting for good."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        url = f"ws://127.0.0.1:{rc.port}{path}"
        client = NodeClient(
            url, rc.identity, rc.identity.public_key(), PROFILE.name,
            MadeUpWorker(FP, PROFILE.max_new_tokens),
        )  # fmt: skip
        stop = asyncio.Event()
        task = asyncio.create_task(client.run_forever(stop))
        async with asyncio.timeout(10):
            while client.last_refusal is None and not task.done():
                await asyncio.sleep(0.01)
        assert not task.done()  # still running: waiting out the refusal backoff
        stop.set()
        await asyncio.wait_for(task, 10)
    text = client.last_refusal
    assert "is not a netcheck node endpoint" in text
    assert f'coordinator_url = "ws://127.0.0.1:{rc.port}/v1/ws"' in text
    # it is retried, so the message must not say otherwise (it said "Not retrying.",
    # logged as "... Not retrying. (not authenticated: retrying with backoff)")
    assert "Not retrying" not in text


async def test_overloaded_proxy_is_retried(tmp_path: Path) -> None:
    """A 503 from a proxy in front of the coordinator is transient: the node keeps trying."""
    assert not not_an_endpoint(503) and not not_an_endpoint(429)

    async with overloaded_endpoint() as port:
        url = f"ws://127.0.0.1:{port}/v1/ws"
        client = dial(url, MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name)
        stop = asyncio.Event()
        task = asyncio.create_task(client.run_forever(stop))
        await asyncio.sleep(1.0)
        assert not task.done()  # still retrying
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_start_banner_names_key_profile_and_fingerprint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before the engine loads the node logs its key and profile; after, the fingerprint."""
    cfg = node_config(tmp_path, "ws://127.0.0.1:1/", name="n1")
    node_key = load_private_key(tmp_path / "node.pem")

    async def make_worker(profile: object) -> Worker:
        return MadeUpWorker(FP, PROFILE.max_new_tokens)

    caplog.set_level(logging.INFO, logger="netcheck")

    async def run() -> None:
        await run_node(cfg, make_worker)

    task = asyncio.create_task(run())
    await asyncio.sleep(1.0)  # port 1 refuses: the node retries in the background
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    text = caplog.text
    assert f"key {public_key_text(node_key)}, profile cpu-tiny" in text
    assert "loading engine torch" in text
    assert "engine ready in" in text and "fingerprint " in text and "weight_hash=3333" in text
