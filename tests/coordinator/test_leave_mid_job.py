"""A node that reads the head of its job frame, then stops reading or leaves while the
coordinator is still writing the rest, is ``missing`` (a capacity strike) and loaded, not
``disconnected``. Adversarial review, session 13.

A job frame of the H200 profiles is large (256 prompts of 1,023 bytes: about 270 KB),
more than the coordinator's buffers hold (asyncio's 64 KiB high-water mark plus the
kernel's send buffer, tens of KB on a WAN path), so its write completes only once the
node has read most of it. The websocket frame header (its first bytes) gives the
payload's length, and only a job is that long: a farm controller that shrank its
identities' receive buffers sees both identities' jobs arrive before either write
completes, and can make the surplus one stop reading (the coordinator aborts it at
``dispatch_timeout_s``) or close. Before this review both were ``disconnected``: no strike
and not a loaded round (session 12's rule keyed on the job write *completing*).
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import DeadlineParams
from netcheck.coordinator.rounds import run_round
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import canary_store, raw_session, running_coordinator, small_profile
from netcheck.protocol.messages import EchoReply, ProfileClaim

# The shape of h200-torch-bf16's batches (B 256, 1,023-byte prompts): a job frame of
# about 270 KB, the size that matters here. Nothing runs an engine.
PROFILE = small_profile(
    "bigjob", batch_size=256, prompt_len=1024, prompt_chars=1023, dispatch_timeout_s=2.0,
    result_timeout_s=6.0, deadline=DeadlineParams(t_ref_s=0.2, slack_s=0.1),
)  # fmt: skip
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}
CLAIM = ProfileClaim(profile=PROFILE.name, fingerprint=FP, software="test")


def _watch_for_job_head(
    ws: aiohttp.ClientWebSocketResponse, on_head: asyncio.Event, leave: bool
) -> None:
    """The node side of the attack: its socket's receive buffer is shrunk, and the bytes
    it receives are scanned for the head of a websocket binary frame with a 64-bit
    length (a payload over 64 KiB: only a job). On that head it stops reading (and with
    ``leave``, cuts its connection) before the rest of the frame arrives."""
    tcp = ws._writer.transport  # type: ignore[attr-defined]
    tcp.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    proto: Any = tcp.get_protocol()
    received = proto.data_received

    def data_received(data: bytes) -> None:
        if not on_head.is_set() and len(data) >= 2 and data[0] == 0x82 and data[1] & 0x7F == 127:
            on_head.set()
            tcp.pause_reading()
            if leave:
                tcp.abort()
            return
        received(data)

    proto.data_received = data_received


async def _round(tmp_path: Path, how: str) -> tuple[str, str, dict[str, Any]]:
    """One round in which the raw node, on its job's head, stops reading (``"stall"``),
    cuts its connection (``"close"``) or connects again under the same key, which
    supersedes the stalled session (``"reconnect"``)."""
    store = canary_store(tmp_path / "n.db", PROFILE, FP, 8, answer=(1, 2, 3, 4))
    identity = Ed25519PrivateKey.generate()
    key = public_key_text(identity)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.start(rc.node(MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1, timeout_s=5.0)
        http, ws, transport = await raw_session(rc, identity, CLAIM)
        second: tuple[Any, Any, Any] | None = None
        try:
            await rc.wait_connected(2, timeout_s=5.0)
            s = rc.coord.sessions[key]
            assert s.tcp is not None  # a WAN path's send buffer (loopback autotunes to MBs)
            s.tcp.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
            head = asyncio.Event()
            _watch_for_job_head(ws, head, leave=how == "close")

            async def answer_echoes() -> None:
                async for msg in ws:
                    echo = transport.open(msg.data)
                    await ws.send_bytes(transport.seal(EchoReply(echo.nonce)))  # type: ignore[attr-defined]

            echoes = asyncio.create_task(answer_echoes())
            round_task = asyncio.create_task(run_round(rc.coord, PROFILE.name))
            await asyncio.wait_for(head.wait(), 20.0)  # the node saw its job's head
            if how == "reconnect":
                second = await raw_session(rc, identity, CLAIM)
            report = await asyncio.wait_for(round_task, 20.0)
            echoes.cancel()
        finally:
            ws._writer.transport.abort()  # type: ignore[attr-defined]
            await http.close()
            if second is not None:
                await second[1].close()
                await second[0].close()
        (mine,) = [o for o in report.outcomes if o.node_key == key]
        (row,) = [r for r in rc.coord.store.round_verdicts(report.round_id) if r["node_key"] == key]
    return str(mine.verdict), mine.reason, row


@pytest.mark.parametrize("how", ["stall", "close", "reconnect"])
async def test_a_node_that_saw_its_job_head_and_stalled_or_left_is_missing(
    tmp_path: Path, how: str
) -> None:
    verdict, reason, row = await _round(tmp_path, how)
    assert verdict == "missing", reason
    assert reason.startswith("session closed after its job was delivered, before acknowledging")
    if how == "stall":  # the coordinator aborted it at the dispatch bound, and says so
        assert "stopped reading: job write blocked" in reason, reason
    assert row["extra"]["job_written_ns"] is not None  # loaded: censored at the deadline
