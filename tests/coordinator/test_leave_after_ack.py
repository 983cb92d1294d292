"""A node whose job was written to it in full and that then closed its session without a
result is ``missing`` (a capacity strike), whether it left before acknowledging the
job, after the ack and before its release, or after the release, before the deadline;
only a node whose job write never completed (it stopped reading, so the write blocked
and the coordinator aborted it) is ``disconnected``. Adversarial review, session 12
(docs/detection.md "What escapes", leaving when co-loaded): a farm whose controller sees
two of its identities get jobs made one of them leave, and that ``disconnected`` was no
strike and not even a loaded round for the contention analysis. Closed after the ack by
leave12, on the job's delivery by pre12."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import DeadlineParams
from netcheck.coordinator.rounds import run_round
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import (
    RunningCoordinator,
    canary_store,
    running_coordinator,
    serve_until_job,
    small_profile,
)
from netcheck.lab.testing import raw_session as hand_session
from netcheck.protocol.messages import Ack, Echo, ProfileClaim, Release
from netcheck.protocol.transport import Transport

PROFILE = small_profile(
    "leaveack", dispatch_timeout_s=2.0, result_timeout_s=6.0,
    deadline=DeadlineParams(t_ref_s=0.2, slack_s=0.1),
)  # fmt: skip
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}
CLAIM = ProfileClaim(profile=PROFILE.name, fingerprint=FP, software="test")


async def _until_release(ws: aiohttp.ClientWebSocketResponse, transport: Transport) -> None:
    while not isinstance(transport.open((await ws.receive(timeout=8.0)).data), Release):
        pass


async def _slow_acker(rc: RunningCoordinator, joined: asyncio.Event) -> None:
    """A raw node that acks 1 s after its job (holding the release back that long),
    then closes at its release."""
    http, ws, transport = await hand_session(rc, Ed25519PrivateKey.generate(), CLAIM)
    try:
        joined.set()
        job = await serve_until_job(ws, transport)
        await asyncio.sleep(1.0)
        await ws.send_bytes(transport.seal(Ack(job.round_id)))
        await _until_release(ws, transport)
    finally:
        await ws.close()
        await http.close()


def _stall(rc: RunningCoordinator, key: str, ws: aiohttp.ClientWebSocketResponse) -> None:
    """Shrink the socket buffers at both ends and make the raw node stop reading (as
    tests/faults/test_stalled_writes.py does): the coordinator's writes to it block once
    a few kilobytes are unread."""
    s = rc.coord.sessions[key]
    assert s.tcp is not None
    s.tcp.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    s.tcp.set_write_buffer_limits(high=1024)
    node_transport = ws._writer.transport  # type: ignore[attr-defined]
    node_transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    node_transport.pause_reading()


async def _fill(rc: RunningCoordinator, key: str) -> None:
    """Write echoes to the stalled node until a write blocks (bound far beyond the test)."""
    s = rc.coord.sessions[key]
    for i in range(20_000):
        done, _ = await asyncio.wait({s.start_send(Echo(i), 30.0)}, timeout=0.05)
        if not done:
            return
    raise AssertionError("the coordinator's writes never blocked")


async def _round_with_a_leaver(tmp_path: Path, when: str) -> tuple[str, str, dict[str, Any]]:
    """One round of a node (random answers) and a raw node that closes its session (no bye)
    ``when``: ``"stalled"`` (it stopped reading before the round, so its job write
    blocks and the coordinator aborts it), ``"before-ack"`` (on its job),
    ``"before-release"`` (right after its ack; a third node acks 1 s late, so the close
    is seen before the release) or ``"after-release"`` (on its release, before the
    deadline). The raw node's (verdict, reason, stored verdict+result row)."""
    store = canary_store(tmp_path / "n.db", PROFILE, FP, 24, answer=(1, 2, 3, 4))
    identity = Ed25519PrivateKey.generate()
    key = public_key_text(identity)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.start(rc.node(MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name))
        nodes = 2
        slow: asyncio.Task[None] | None = None
        if when == "before-release":
            joined = asyncio.Event()
            slow = asyncio.create_task(_slow_acker(rc, joined))
            await asyncio.wait_for(joined.wait(), 5.0)
            nodes = 3
        await rc.wait_connected(nodes - 1, timeout_s=5.0)
        http, ws, transport = await hand_session(rc, identity, CLAIM)
        try:
            await rc.wait_connected(nodes, timeout_s=5.0)
            if when == "stalled":
                _stall(rc, key, ws)
                await _fill(rc, key)
            round_task = asyncio.create_task(run_round(rc.coord, PROFILE.name))
            if when != "stalled":
                job = await serve_until_job(ws, transport)
                if when not in ("before-ack", "stalled"):
                    await ws.send_bytes(transport.seal(Ack(job.round_id)))
                if when == "after-release":
                    await _until_release(ws, transport)
                await ws.close()
            report = await asyncio.wait_for(round_task, 12.0)
            if slow is not None:
                await asyncio.wait_for(slow, 5.0)
        finally:
            if when == "stalled":
                ws._writer.transport.resume_reading()  # type: ignore[attr-defined]
            await ws.close()
            await http.close()
        (mine,) = [o for o in report.outcomes if o.node_key == key]
        (row,) = [r for r in rc.coord.store.round_verdicts(report.round_id) if r["node_key"] == key]
    assert len(report.outcomes) == nodes, report.as_dict()  # the others were judged too
    return str(mine.verdict), mine.reason, row


async def test_leaving_after_the_ack_before_the_release_is_missing(tmp_path: Path) -> None:
    verdict, reason, row = await _round_with_a_leaver(tmp_path, "before-release")
    assert verdict == "missing", reason
    assert reason.startswith("session closed after acknowledging its job, without a result")
    assert "before its release" in reason and row["released_ns"] is None


async def test_leaving_after_the_release_before_the_deadline_is_missing(tmp_path: Path) -> None:
    verdict, reason, row = await _round_with_a_leaver(tmp_path, "after-release")
    assert verdict == "missing", reason
    assert reason.startswith("session closed after acknowledging its job, without a result")
    assert row["released_ns"] is not None


async def test_leaving_on_the_job_before_the_ack_is_missing(tmp_path: Path) -> None:
    """The job arrives before the ack: a farm controller that sees two identities' jobs
    can close one before acking. Its job was written in full: ``missing``, and its
    stored job-written stamp makes the round a loaded one."""
    verdict, reason, row = await _round_with_a_leaver(tmp_path, "before-ack")
    assert verdict == "missing", reason
    assert reason == "session closed after its job was delivered, before acknowledging it"
    assert row["released_ns"] is None
    assert row["extra"]["acked_ns"] is None and row["extra"]["job_written_ns"] is not None


async def test_a_node_whose_job_write_blocked_is_disconnected(tmp_path: Path) -> None:
    """A node that stopped reading, so its job write never completed (aborted at the
    dispatch bound): its job was not delivered, ``disconnected``, no job-written stamp."""
    verdict, reason, row = await _round_with_a_leaver(tmp_path, "stalled")
    assert verdict == "disconnected", reason
    assert reason.startswith("stopped reading"), reason
    assert row["released_ns"] is None
    assert row["extra"]["job_sent_ns"] is not None and row["extra"]["job_written_ns"] is None
