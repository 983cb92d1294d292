"""Node faults during a round, over real loopback sockets (a real node process where it
is killed): the round completes, the faulty node gets the right verdict, nothing of it
is stored as valid, and every other node is served as usual."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fault_support import RawNode, key_of, light_profile, node_process, wait_for

from netcheck.config import DeadlineParams
from netcheck.coordinator import rounds, rtt
from netcheck.coordinator.rounds import run_round
from netcheck.errors import CloseCode
from netcheck.lab.load import HashWorker, add_hash_references
from netcheck.lab.testing import RunningCoordinator, running_coordinator
from netcheck.storage import Store

PROFILE = light_profile()


def _store(db_url: str, count: int = 40) -> Store:
    store = Store(db_url)
    add_hash_references(store, PROFILE, count)
    return store


def _honest(rc: RunningCoordinator, n: int) -> set[str]:
    from netcheck.keys import public_key_text

    keys = set()
    for _ in range(n):
        client = rc.node(HashWorker(PROFILE.max_new_tokens), PROFILE.name)
        rc.start(client)
        keys.add(public_key_text(client.identity))
    return keys


def _assert_nothing_valid(store: Store, round_id: str, node_key: str) -> None:
    row = store.result_row(round_id, node_key)
    assert row is not None
    assert row["signature"] is None and row["commitment"] is None and row["outputs"] is None


@pytest.mark.slow
async def test_node_process_killed_mid_round(tmp_path: Path, db_url: str) -> None:
    """SIGKILL of a node process after its release: verdict missing (it had acknowledged
    its job), the round completes without waiting for the result timeout, the other
    nodes pass."""
    store = _store(db_url)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        honest = _honest(rc, 3)
        key_file = tmp_path / "victim.pem"
        proc = node_process(rc, PROFILE, key_file, delay_s=60.0, log=tmp_path / "victim.log")
        victim = key_of(key_file)
        try:
            await rc.wait_connected(4, timeout_s=20.0)
            t0 = time.monotonic()
            task = asyncio.create_task(run_round(rc.coord, PROFILE.name))
            session = rc.coord.sessions[victim]
            await wait_for(lambda: bool(session._results), 10.0)  # released: collecting
            os.kill(proc.pid, signal.SIGKILL)
            report = await asyncio.wait_for(task, 10.0)
        finally:
            proc.kill()
            proc.wait()
        assert time.monotonic() - t0 < PROFILE.result_timeout_s
        got = {o.node_key: str(o.verdict) for o in report.outcomes}
        assert got == {victim: "missing", **dict.fromkeys(honest, "pass")}
        _assert_nothing_valid(store, report.round_id, victim)
        assert store.list_rounds()[0]["status"] == "complete"
        again = await run_round(rc.coord, PROFILE.name)  # the others are still served
        assert {str(o.verdict) for o in again.outcomes} == {"pass"}


async def test_node_reconnects_mid_round(tmp_path: Path, db_url: str) -> None:
    """A node that reconnects after its release gets a fresh session: the old one is
    closed as superseded (verdict missing: it had acknowledged its job), its frames cannot be replayed on the
    new session, and the node passes the next round on a fresh session."""
    store = _store(db_url)
    identity = Ed25519PrivateKey.generate()
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        honest = _honest(rc, 2)
        old = await RawNode.connect(rc, PROFILE, identity)
        new = None
        try:
            await rc.wait_connected(3, timeout_s=10.0)
            task = asyncio.create_task(run_round(rc.coord, PROFILE.name))
            job, release = await old.until_release()
            stale = old.honest_result(job, release, PROFILE.max_new_tokens)
            new = await RawNode.connect(rc, PROFILE, identity)  # fresh handshake
            closing = await old.ws.receive(timeout=5.0)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert old.ws.close_code == CloseCode.SUPERSEDED
            report = await asyncio.wait_for(task, 10.0)
            got = {o.node_key: str(o.verdict) for o in report.outcomes}
            assert got == {old.key: "missing", **dict.fromkeys(honest, "pass")}
            _assert_nothing_valid(store, report.round_id, old.key)
            assert new.transport.session_id != old.transport.session_id
            await new.ws.send_bytes(stale)  # replay the old session's signed result
            await new.ws.receive(timeout=5.0)
            assert new.ws.close_code in (CloseCode.COUNTER_MISMATCH, CloseCode.DECRYPT_FAILED)
        finally:
            await old.close()
            if new is not None:
                await new.close()
        _assert_nothing_valid(store, report.round_id, old.key)
        client = rc.node(HashWorker(PROFILE.max_new_tokens), PROFILE.name, identity)
        rc.start(client)
        await rc.wait_connected(3, timeout_s=10.0)
        again = await run_round(rc.coord, PROFILE.name)
        assert {o.node_key: str(o.verdict) for o in again.outcomes}[old.key] == "pass"


async def test_network_stall_after_release(tmp_path: Path, db_url: str) -> None:
    """A node whose network stalls after its ack (it stops reading, sends nothing): the
    result timeout fires, the round completes, the node fails, the others pass."""
    # Deadline 1.5 x 0.5 + 2 x 0.1 + 0.5 = 1.45 s, within the 1.5 s result timeout.
    profile = light_profile(result_timeout_s=1.5, deadline=DeadlineParams(t_ref_s=0.5, slack_s=0.5))
    store = Store(db_url)
    add_hash_references(store, profile, 40)
    async with running_coordinator(tmp_path, [profile], store=store) as rc:
        honest = _honest(rc, 3)
        stalled = await RawNode.connect(rc, profile, Ed25519PrivateKey.generate())
        try:
            await rc.wait_connected(4, timeout_s=10.0)
            task = asyncio.create_task(run_round(rc.coord, profile.name))
            await stalled.until_job()
            stalled.stop_reading()
            t0 = time.monotonic()
            report = await asyncio.wait_for(task, 10.0)
            took = time.monotonic() - t0
        finally:
            await stalled.close()
        assert profile.result_timeout_s <= took + 0.1 < profile.result_timeout_s + 3.0
        got = {o.node_key: str(o.verdict) for o in report.outcomes}
        assert got.pop(stalled.key) == "missing"
        assert got == dict.fromkeys(honest, "pass")
        _assert_nothing_valid(store, report.round_id, stalled.key)


@pytest.mark.slow
async def test_slow_reader_does_not_stall_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Two nodes stop reading (one before its job, one after its ack) with full socket
    buffers: dispatch is bounded, the other nodes are released within milliseconds of
    each other and pass, and the round ends on its timeouts, not on the heartbeat."""
    monkeypatch.setattr(rtt, "ECHO_TIMEOUT_S", 0.3)
    # B = 6,000 prompts: a ~0.5 MB job frame, more than the (shrunken) socket buffers and
    # the transport's 64 KiB high-water mark hold, so the job write to a non-reader must
    # wait (2,000 prompts were not enough: the warning asserted below did not appear).
    profile = light_profile(
        batch_size=6000, dispatch_timeout_s=1.0, result_timeout_s=2.0,
        deadline=DeadlineParams(t_ref_s=0.8, slack_s=0.5),  # 1.9 s, within the 2 s timeout
    )  # fmt: skip
    store = Store(f"sqlite:///{tmp_path / 'slow.db'}")
    add_hash_references(store, profile, 60)
    async with running_coordinator(tmp_path, [profile], store=store) as rc:
        honest = _honest(rc, 4)
        deaf = await RawNode.connect(rc, profile, Ed25519PrivateKey.generate())
        late = await RawNode.connect(rc, profile, Ed25519PrivateKey.generate())
        try:
            await rc.wait_connected(6, timeout_s=15.0)
            # Small buffers at both ends of the deaf node, so its backpressure is real.
            server = rc.coord.sessions[deaf.key].ws._req.transport  # type: ignore[union-attr]
            server.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            deaf.ws._writer.transport.get_extra_info("socket").setsockopt(  # type: ignore[union-attr]
                socket.SOL_SOCKET, socket.SO_RCVBUF, 4096
            )
            deaf.stop_reading()
            caplog.set_level(logging.WARNING, logger=rounds.__name__)
            task = asyncio.create_task(run_round(rc.coord, profile.name))
            # Generous waits: planning time depends on the machine's load; the bounds that
            # matter are on the dispatch and collect phases, asserted below.
            await late.until_job(timeout_s=60.0)
            late.stop_reading()
            report = await asyncio.wait_for(task, 60.0)
        finally:
            await deaf.close()
            await late.close()
        got = {o.node_key: str(o.verdict) for o in report.outcomes}
        # The deaf node's blocked job write aborted its connection (#12 item 3), not a
        # cancelled write that would poison the session. Its job's head had reached the
        # socket, so it is `missing` (session 13: a node cannot be told apart from one
        # that read the head, which gives the frame's length, and then stopped reading;
        # tests/coordinator/test_leave_mid_job.py).
        assert got.pop(deaf.key) == "missing"
        assert got.pop(late.key) == "missing"
        assert got == dict.fromkeys(honest, "pass")
        assert "not reading (job send blocked)" in caplog.text  # the backpressure was real
        phases = report.phases
        assert phases["release_skew_s"] < 0.05, phases
        # Send bound + ack wait, each dispatch_timeout_s; the heartbeat would take >= 15 s.
        assert phases["dispatch_s"] < 2 * profile.dispatch_timeout_s + 1.5, phases
        assert phases["collect_s"] < profile.result_timeout_s + 1.5, phases


HOSTILE_REASON = "boom\x00\n2030-01-01 INFO verdict=pass [/bold][link=http://x]y[/link]\x1b[31m"


async def test_hostile_error_text_is_stored_escaped_and_rounds_complete(
    tmp_path: Path, db_url: str
) -> None:
    """A node's `error` reason with NUL, a newline, rich markup and an ANSI escape: the
    round is recorded on every backend (PostgreSQL refused the NUL and lost every
    verdict), the text is stored escaped, and the CLI table prints it literally."""
    from rich.console import Console

    from netcheck import report as report_module
    from netcheck.protocol.messages import Error

    profile = light_profile()
    store = _store(db_url)
    async with running_coordinator(tmp_path, [profile], store=store) as rc:
        honest = _honest(rc, 2)
        bad = await RawNode.connect(rc, profile, Ed25519PrivateKey.generate())
        try:
            await rc.wait_connected(3, timeout_s=10.0)
            task = asyncio.create_task(run_round(rc.coord, profile.name))
            job, _release = await bad.until_release()
            await bad.ws.send_bytes(bad.transport.seal(Error(job.round_id, HOSTILE_REASON)))
            report = await asyncio.wait_for(task, 30.0)
        finally:
            await bad.close()
    got = {o.node_key: o for o in report.outcomes}
    assert {k: str(got[k].verdict) for k in honest} == dict.fromkeys(honest, "pass")
    reason = got[bad.key].reason
    assert all(c.isprintable() for c in reason) and "\\x00" in reason and "\\n2030" in reason
    row = store.result_row(report.round_id, bad.key)
    assert row is not None and row["error"] is not None and "\\x1b[31m" in row["error"]
    assert [r["status"] for r in store.list_rounds()] == ["complete"]

    out = Console(width=400, record=True, force_terminal=False)
    original = report_module.console
    report_module.console = lambda: out  # type: ignore[assignment]
    try:
        report_module.print_round(report.as_dict())
    finally:
        report_module.console = original  # type: ignore[assignment]
    assert "[/bold][link=http://x]y[/link]" in out.export_text()


@pytest.mark.parametrize("violation", ["second-ack", "result-before-release"])
async def test_protocol_violation_before_release_blames_the_node(
    tmp_path: Path, violation: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A node that breaks the protocol between its ack and the release (a second ack, a
    result before the release) closes its own session. Its release could then not be
    sealed, and that was counted as the coordinator's failure: verdict
    ``coordinator-error``, which never blames a node (no capacity strike), so a cheater
    could turn any round into a free pass. Now ``missing``, like any node that closes
    its session after acknowledging its job (``disconnected`` until session 12); the
    other nodes pass."""
    from netcheck.protocol.messages import Ack, Result

    store = _store(f"sqlite:///{tmp_path / 'v.db'}")
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        honest = _honest(rc, 2)
        raw = await RawNode.connect(rc, PROFILE, Ed25519PrivateKey.generate())
        try:
            await rc.wait_connected(3, timeout_s=10.0)
            task = asyncio.create_task(run_round(rc.coord, PROFILE.name))
            job = await raw.until_job()
            bad = (
                Ack(job.round_id)
                if violation == "second-ack"
                else Result(job.round_id, ((1,) * PROFILE.max_new_tokens,), bytes(32), bytes(64))
            )
            await raw.ws.send_bytes(raw.transport.seal(bad))
            report = await asyncio.wait_for(task, 15.0)
        finally:
            await raw.close()
    got = {o.node_key: str(o.verdict) for o in report.outcomes}
    assert got == {raw.key: "missing", **dict.fromkeys(honest, "pass")}
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_session_failed_by_the_node_before_dispatch_blames_the_node(tmp_path: Path) -> None:
    """The same at dispatch: a session the node's input has failed (its reader is
    closing it, the socket not yet closed) cannot seal the job; that was
    ``coordinator-error`` too. Now ``disconnected``."""
    from netcheck.errors import ProtocolError

    store = _store(f"sqlite:///{tmp_path / 'd.db'}")
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        honest = _honest(rc, 1)
        raw = await RawNode.connect(rc, PROFILE, Ed25519PrivateKey.generate())
        try:
            await rc.wait_connected(2, timeout_s=10.0)
            session = rc.coord.sessions[raw.key]
            with pytest.raises(ProtocolError):  # as the reader does on a refused frame
                session.protocol.refuse(CloseCode.UNEXPECTED_MESSAGE, "test")
            session.fail_waiters()
            report = await asyncio.wait_for(run_round(rc.coord, PROFILE.name), 15.0)
        finally:
            await raw.close()
    got = {o.node_key: str(o.verdict) for o in report.outcomes}
    assert got == {raw.key: "disconnected", **dict.fromkeys(honest, "pass")}
