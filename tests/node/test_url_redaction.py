"""A password or token in the node's ``coordinator_url`` never reaches its log or its
errors: the start-up line, the pre-flight warning or refusal, the reconnect warnings
(whose aiohttp text quotes the URL dialled) and the doctor's messages."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from fake_coordinator_support import dial
from node_support import node_config, overloaded_endpoint

from netcheck.errors import CloseCode, NetcheckError
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import running_coordinator, small_profile
from netcheck.node.app import run_node
from netcheck.node.doctor import ask_coordinator
from netcheck.node.refusals import refusal_message, superseded_message, wrong_endpoint_message
from netcheck.node.workers import Worker

PROFILE = small_profile("redact")
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "55" * 32}
SECRETS = ("s3cret", "t0k3n")


class Stop(Exception):
    """Raised by the worker factory: the test ends once start-up is logged."""


async def no_engine(profile: object) -> Worker:
    raise Stop


def assert_hidden(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, text


@pytest.mark.parametrize("path", ["/v1/ws", "/ws"])
async def test_start_up_log_hides_credentials(
    tmp_path: Path, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The start-up line, the 'holds the pinned key' line and the wrong-endpoint error
    (with its corrected URL) show ``***@`` and ``token=***``, never the secrets."""
    caplog.set_level(logging.INFO, logger="netcheck")
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        url = f"ws://bob:s3cret@127.0.0.1:{rc.port}{path}?token=t0k3n"
        cfg = node_config(tmp_path, url, public_key_text(rc.identity.public_key()), name="n1")
        with pytest.raises(Stop):
            await run_node(cfg, no_engine)
    assert_hidden(caplog.text)
    start = next(r.getMessage() for r in caplog.records if "starting netcheck" in r.getMessage())
    assert f"coordinator ws://***@127.0.0.1:{rc.port}{path}?token=***" in start
    if path == "/ws":
        assert f'coordinator_url = "ws://***@127.0.0.1:{rc.port}/v1/ws"' in caplog.text


async def test_unreachable_warning_hides_credentials(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The pre-flight's 'cannot reach' warning shows the URL redacted."""
    caplog.set_level(logging.INFO, logger="netcheck")
    cfg = node_config(tmp_path, "ws://bob:s3cret@127.0.0.1:1/v1/ws?token=t0k3n", name="n1")
    with pytest.raises(Stop):
        await run_node(cfg, no_engine)
    assert "cannot reach ws://***@127.0.0.1:1/v1/ws?token=***" in caplog.text
    assert_hidden(caplog.text)


async def test_reconnect_warning_hides_the_url_in_aiohttp_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 503 upgrade answer is logged with aiohttp's error text, which quotes the URL
    dialled (``url='ws://bob:s3cret@...'``): both copies are redacted."""
    caplog.set_level(logging.INFO, logger="netcheck")

    async with overloaded_endpoint() as port:
        url = f"ws://bob:s3cret@127.0.0.1:{port}/v1/ws?token=t0k3n"
        client = dial(url, MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name)
        stop = asyncio.Event()
        task = asyncio.create_task(client.run_forever(stop))
        async with asyncio.timeout(10):
            while "503" not in caplog.text:
                await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(task, 10)
    assert "/v1/ws?token=***'" in caplog.text  # aiohttp's copy (it drops the userinfo)
    assert_hidden(caplog.text)


def test_refusal_messages_hide_credentials() -> None:
    """Every refusal text names the coordinator by its redacted URL."""
    url = "wss://bob:s3cret@h.example/v1/ws?token=t0k3n"
    texts = [wrong_endpoint_message("wss://bob:s3cret@h.example/?token=t0k3n", 404),
             superseded_message(url, "ed25519:n")]  # fmt: skip
    texts += [
        refusal_message(code, url=url, pinned_key="k", node_key="n", profile="p")
        for code in (CloseCode.WRONG_COORDINATOR_KEY, CloseCode.UNKNOWN_NODE_KEY,
                     CloseCode.PROFILE_MISMATCH)
    ]  # fmt: skip
    for text in texts:
        assert_hidden(text)
        assert "wss://***@h.example/" in text


async def test_doctor_query_hides_credentials(tmp_path: Path) -> None:
    """The doctor's signed query to an unreachable coordinator names it redacted."""
    from netcheck.config import load_node_config

    cfg = load_node_config(node_config(tmp_path, "ws://bob:s3cret@127.0.0.1:1/v1/ws", name="n1"))
    with pytest.raises(NetcheckError) as info:
        await ask_coordinator(cfg, "cpu-tiny", FP, timeout_s=5)
    assert "cannot reach http://***@127.0.0.1:1/" in str(info.value)
    assert_hidden(str(info.value))
