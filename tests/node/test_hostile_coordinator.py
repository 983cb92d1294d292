"""A node facing a coordinator that holds the pinned key but misbehaves (hostile or
buggy): real websocket sessions, the real handshake and transport; the coordinator
side is scripted here with the protocol's sans-I/O core. The node must bound what it
holds and end every session without an unhandled exception."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fake_coordinator_support import Script, dial, fake_coordinator, node_endpoint, read, serving

import netcheck.node.client as client_mod
from netcheck.config import NodeConfig, load_node_config
from netcheck.errors import NetcheckError
from netcheck.keys import generate_key, public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.node.client import NodeClient
from netcheck.node.doctor import ask_coordinator
from netcheck.node.serving import MAX_JOBS_IN_FLIGHT, MAX_PROBES_IN_FLIGHT
from netcheck.protocol.jobs import seal_job
from netcheck.protocol.messages import (
    Ack,
    Bye,
    Echo,
    Error,
    Job,
    Message,
    Probe,
    ProbeReply,
    Release,
    Result,
)
from netcheck.protocol.session import Session

FP: dict[str, str | int] = {"engine": "fake", "batch_size": 4, "prompt_len": 32}
KEY, NONCE = os.urandom(32), bytes(12)


def job(round_id: str) -> Job:
    return Job(round_id, NONCE, seal_job(["p"] * 4, KEY, round_id, NONCE), 4, 4, 5.0)


async def run_node(script: Script, worker: Any) -> tuple[NodeClient, list[dict[str, Any]]]:
    """Run one node session against ``script``; returns the client and the event loop's
    unhandled-exception reports (a task that died with an exception nobody awaited)."""
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, ctx: unhandled.append(ctx))
    try:
        async with fake_coordinator(script) as (url, identity):
            node = dial(url, worker, "p", identity.public_key())
            await asyncio.wait_for(node.run_session(), 30)
        for _ in range(3):  # let finished tasks be collected and reported
            await asyncio.sleep(0.05)
    finally:
        loop.set_exception_handler(old)
    return node, unhandled


class GatedWorker(MadeUpWorker):
    """Batches and probes wait for ``gate``; counts the probes running at once."""

    def __init__(self) -> None:
        super().__init__(FP, 4)
        self.gate = asyncio.Event()
        self.probing = self.most_probing = 0

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        await self.gate.wait()
        return await super().run(prompts)

    async def probe(self, challenge: bytes) -> bytes:
        self.probing += 1
        self.most_probing = max(self.most_probing, self.probing)
        await self.gate.wait()
        self.probing -= 1
        return bytes(32)


async def test_job_flood_is_answered_busy_beyond_the_in_flight_cap() -> None:
    """Jobs beyond MAX_JOBS_IN_FLIGHT (held or running) get ``error`` "node busy" and
    are not stored (before: every job was held, 300 jobs of 900 KB = 270 MB more RSS);
    the held ones still run, and a finished one frees its place."""
    worker = GatedWorker()
    seen: list[Message] = []

    async def script(ws: web.WebSocketResponse, session: Session) -> None:
        n = MAX_JOBS_IN_FLIGHT + 6
        for i in range(n):
            await ws.send_bytes(session.send(job(f"r{i}")))
        seen.extend([await read(ws, session) for _ in range(n)])
        await ws.send_bytes(session.send(Release("r0", KEY)))  # r0 runs
        await ws.send_bytes(session.send(job("late")))  # r0 still holds its place
        seen.append(await read(ws, session))
        worker.gate.set()
        seen.append(await read(ws, session))  # r0's result
        await ws.send_bytes(session.send(job("after")))  # a place is free again
        seen.append(await read(ws, session))
        await ws.close()

    _, unhandled = await run_node(script, worker)
    first, rest = seen[:MAX_JOBS_IN_FLIGHT], seen[MAX_JOBS_IN_FLIGHT:-3]
    assert [type(m) for m in first] == [Ack] * MAX_JOBS_IN_FLIGHT
    assert rest and all(isinstance(m, Error) and m.reason.startswith("node busy") for m in rest)
    late, result, after = seen[-3:]
    assert isinstance(late, Error) and late.round_id == "late"
    assert isinstance(result, Result) and result.round_id == "r0"
    assert isinstance(after, Ack) and after.round_id == "after"
    assert unhandled == []


async def test_probe_flood_is_bounded() -> None:
    """At most MAX_PROBES_IN_FLIGHT probes compute at once; the excess gets no reply
    (before: one task per probe, 37,575 pending after 100,000 probes)."""
    worker = GatedWorker()
    replies: list[Message] = []

    async def script(ws: web.WebSocketResponse, session: Session) -> None:
        for i in range(MAX_PROBES_IN_FLIGHT * 4):
            await ws.send_bytes(session.send(Probe(i, os.urandom(32))))
        await asyncio.sleep(0.3)
        worker.gate.set()
        replies.extend([await read(ws, session) for _ in range(MAX_PROBES_IN_FLIGHT)])
        with pytest.raises(TimeoutError):  # nothing more
            await ws.receive(timeout=0.3)
        await ws.close()

    _, unhandled = await run_node(script, worker)
    assert worker.most_probing == MAX_PROBES_IN_FLIGHT
    assert [type(m) for m in replies] == [ProbeReply] * MAX_PROBES_IN_FLIGHT
    assert unhandled == []


@pytest.mark.parametrize("ending", ["bye", "garbage"])
async def test_session_ending_while_a_batch_runs_leaves_no_task_error(
    ending: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The coordinator says ``bye`` (or sends a frame that fails the session) while the
    node computes; the batch then finishes during the close. Before: its result send
    raised LocalProtocolError in a task nobody awaited ("Task exception was never
    retrieved", with traceback). Now: one log line that the result was not sent."""
    worker = GatedWorker()

    async def script(ws: web.WebSocketResponse, session: Session) -> None:
        await ws.send_bytes(session.send(job("r1")))
        assert isinstance(await read(ws, session), Ack)
        await ws.send_bytes(session.send(Release("r1", KEY)))
        if ending == "bye":
            await ws.send_bytes(session.send(Bye("going away")))
        else:
            await ws.send_bytes(b"\x01" + bytes(40))  # counter 0 again: COUNTER_MISMATCH
        await asyncio.sleep(0.2)
        worker.gate.set()  # the batch ends while the node waits for our close reply
        await asyncio.sleep(0.3)
        await ws.close()

    with caplog.at_level(logging.WARNING, logger="netcheck.node"):
        _, unhandled = await run_node(script, worker)
    assert unhandled == []
    assert "session gone before the result of r1 was sent" in caplog.text


@pytest.mark.parametrize("upgrade", [False, True], ids=["silent-tcp", "silent-after-upgrade"])
async def test_a_silent_server_is_given_up_after_the_handshake_timeout(
    upgrade: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that accepts the connection and then says nothing (no HTTP answer, or
    no ``welcome`` after the upgrade) is given up after HANDSHAKE_TIMEOUT_S with a
    message saying which step. Before: without the upgrade answer the node waited for
    aiohttp's 300 s default, and both timeouts were logged with an empty reason."""
    monkeypatch.setattr(client_mod, "HANDSHAKE_TIMEOUT_S", 0.5)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    async def no_welcome(ws: web.WebSocketResponse) -> None:
        await asyncio.sleep(30)

    async with contextlib.AsyncExitStack() as stack:
        if upgrade:
            url = await stack.enter_async_context(node_endpoint(no_welcome, 0.1))
        else:
            server = await asyncio.start_server(silent, "127.0.0.1", 0)
            stack.callback(server.close)
            url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/ws"
        node = dial(url, MadeUpWorker(FP, 4), "p")
        with pytest.raises(TimeoutError) as err:
            await asyncio.wait_for(node.run_session(), 5)
    step = "handshake not completed" if upgrade else "no websocket upgrade answer"
    assert f"{step} within 0.5 s" in str(err.value)


GOOD_REPLY = (
    b'{"profile": "p", "profile_accepted": true, "profiles": ["p"], "fingerprint_id": "ab",'
    b' "references": 4, "unspent": 4, "profile_references": 4, "mismatch": ""}'
)


@pytest.mark.parametrize(
    ("status", "body", "says"),
    [
        (200, b"{bad", "not JSON"),
        (200, b"[" * 20_000 + b"]" * 20_000, "not JSON"),
        (200, b'{"profile_accepted": true, "profiles": ["p"]}', "'fingerprint_id' missing"),
        (200, b'{"profile_accepted": false, "profiles": "p"}', "'profiles' missing or not list"),
        (200, GOOD_REPLY.replace(b'"unspent": 4', b'"unspent": "4"'), "'unspent' missing"),
        (200, GOOD_REPLY.replace(b'"unspent": 4', b'"unspent": true'), "'unspent' missing"),
        (200, b" " * (2 << 20) + GOOD_REPLY, "reply larger than"),
        (500, b"x" * (2 << 20), "reply larger than"),
    ],
    ids=["syntax", "deep", "missing", "profiles-str", "str-int", "bool-int", "huge", "huge-500"],
)
async def test_doctor_query_refuses_a_bad_reply(
    tmp_path: Path, status: int, body: bytes, says: str
) -> None:
    """The doctor's HTTP query (§5.12) is not authenticated: a reply that is not JSON,
    misses a field, has one of the wrong type or is huge is a NetcheckError naming what
    is wrong. Before: JSONDecodeError / RecursionError from resp.json(), and KeyError or
    TypeError in `netcheck doctor`'s acceptance check, all tracebacks; any size read."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/doctor", answer)
    async with serving(app) as port:
        cfg = node_config(tmp_path, f"ws://127.0.0.1:{port}/v1/ws")
        with pytest.raises(NetcheckError, match=says):
            await ask_coordinator(cfg, "p", FP)


def node_config(tmp_path: Path, url: str) -> NodeConfig:
    """A node config in ``tmp_path`` (with a fresh identity key) that dials ``url``."""
    generate_key(tmp_path / "node.pem")
    key = public_key_text(Ed25519PrivateKey.generate())
    (tmp_path / "node.toml").write_text(
        f'coordinator_url = "{url}"\ncoordinator_key = "{key}"\n'
        'identity_key = "node.pem"\nprofile = "cpu-tiny"\n'
    )
    return load_node_config(tmp_path / "node.toml")


def test_doctor_query_accepts_the_real_reply_shape() -> None:
    """The coordinator's own reply (tests/node/test_doctor.py runs it end to end) passes
    the shape check: a profile accepted with references, and one refused."""
    from netcheck.node.doctor import _reply_problem

    assert _reply_problem(json.loads(GOOD_REPLY)) is None
    assert _reply_problem({"profile": "x", "profile_accepted": False, "profiles": []}) is None


async def test_preflight_names_a_text_answer_to_hello(tmp_path: Path) -> None:
    """A websocket service that answers ``hello`` with a text frame (not a netcheck
    node endpoint) is reported as such. Before: "coordinator closed the handshake: None"
    although nothing was closed."""
    from netcheck.node.preflight import CoordinatorUnreachable, probe_coordinator

    async def text_service(ws: web.WebSocketResponse) -> None:
        await ws.receive()
        await ws.send_str('{"hello": "world"}')
        await asyncio.sleep(1)

    async with node_endpoint(text_service, 0.1) as url:
        with pytest.raises(CoordinatorUnreachable, match="answered hello with a text frame"):
            await probe_coordinator(node_config(tmp_path, url), timeout_s=3)


class OutOfRangeWorker(MadeUpWorker):
    """Answers with a token id the protocol cannot carry (>= 2**31)."""

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        return [[2**31] * 4 for _ in prompts]


async def test_outputs_that_are_no_token_ids_are_answered_with_error() -> None:
    """A worker whose outputs are not token ids (the factoring engine answered a prime
    of 24 digits with [1, n]) gets ``error`` "engine error" to the coordinator. Before:
    ``commitment`` raised LocalProtocolError in the job task ("Task exception was never
    retrieved") and the coordinator got nothing until its timeout."""
    got: list[Message] = []

    async def script(ws: web.WebSocketResponse, session: Session) -> None:
        await ws.send_bytes(session.send(job("r1")))
        assert isinstance(await read(ws, session), Ack)
        await ws.send_bytes(session.send(Release("r1", KEY)))
        got.append(await read(ws, session))
        await ws.close()

    _, unhandled = await run_node(script, OutOfRangeWorker(FP, 4))
    assert unhandled == []
    assert len(got) == 1 and isinstance(got[0], Error) and got[0].reason == "engine error"


class CancelAwareWorker(MadeUpWorker):
    """A batch that waits forever and records its cancellation."""

    def __init__(self) -> None:
        super().__init__(FP, 4)
        self.started, self.cancelled = asyncio.Event(), asyncio.Event()

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")


async def test_connection_dropped_while_replying_ends_the_session_quietly() -> None:
    """The coordinator's connection drops (TCP abort) while the node answers echoes and
    runs a batch. Before: the echo reply's write raised ClientConnectionResetError out
    of run_session ("cannot reach coordinator ...: Cannot write to closing transport"),
    and the session's job task was never cancelled (it kept the worker). Now the
    session ends like a close without a close frame and its tasks are cancelled."""
    worker = CancelAwareWorker()

    async def script(ws: web.WebSocketResponse, session: Session) -> None:
        await ws.send_bytes(session.send(job("r1")))
        assert isinstance(await read(ws, session), Ack)
        await ws.send_bytes(session.send(Release("r1", KEY)))
        await asyncio.wait_for(worker.started.wait(), 5)
        for i in range(50):
            await ws.send_bytes(session.send(Echo(i)))
        assert request_transport(ws) is not None
        request_transport(ws).abort()

    _, unhandled = await run_node(script, worker)  # raised before
    assert unhandled == []
    await asyncio.wait_for(worker.cancelled.wait(), 5)


def request_transport(ws: web.WebSocketResponse) -> Any:
    return ws._req.transport if ws._req is not None else None  # type: ignore[union-attr]
