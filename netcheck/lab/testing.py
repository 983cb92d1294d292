"""Test helpers that are part of the package (as in trio.testing): an in-process
coordinator on a real loopback socket, and node clients to join it.

Used by the test suite and the load/bench scripts; nothing here is emulation of the
protocol: sessions are real websockets with the real handshake and frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import CoordinatorConfig, DeadlineParams, Profile
from netcheck.coordinator.assembly import make_runner
from netcheck.coordinator.rxstamps import KernelStampSite
from netcheck.coordinator.server import WS_PATH, Coordinator
from netcheck.coordinator.session import NodeSession
from netcheck.engines.fingerprint import fingerprint_id
from netcheck.keys import public_key_text
from netcheck.node.client import NodeClient
from netcheck.node.workers import Worker
from netcheck.protocol.handshake import NodeHandshake
from netcheck.protocol.messages import Ack, Echo, EchoReply, Job, ProfileClaim, Release
from netcheck.protocol.transport import Transport
from netcheck.storage import ReferenceRow, Store

#: Fingerprint claimed by test nodes whose workers return made-up tokens (no engine).
FAKE_FINGERPRINT: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}


def small_profile(name: str = "test", **overrides: object) -> Profile:
    """A cheap LLM profile for protocol and round tests (B = 4, 4 new tokens, one canary).

    No engine is loaded by the tests that use it: their workers return made-up tokens.
    Keyword arguments override any :class:`~netcheck.config.Profile` field.
    """
    fields: dict[str, object] = {
        "name": name,
        "engine": "torch",
        "model": "synth:tiny",
        "dtype": "float32",
        "batch_size": 4,
        "prompt_len": 32,
        "max_new_tokens": 4,
        "canaries_min": 1,
        "canaries_max": 1,
        "deadline": DeadlineParams(t_ref_s=1.0),
    }
    fields.update(overrides)
    return Profile(**fields)  # type: ignore[arg-type]


def canary_store(
    db: Path | str,
    profile: Profile,
    fingerprint: Mapping[str, str | int],
    n: int,
    *,
    answer: Sequence[int] | None = None,
    **store_options: Any,
) -> Store:
    """A store holding ``n`` unspent canaries of ``profile`` for the engine ``fingerprint``.

    Args:
        db: a SQLite file path, or a database URL.
        answer: every canary's expected tokens (default: ``max_new_tokens`` ones); the
            prompts are ``canary 0``, ``canary 1``, ...
        store_options: passed to :class:`~netcheck.storage.Store` (e.g. ``busy_timeout_ms``).
    """
    url = db if isinstance(db, str) else f"sqlite:///{db}"
    store = Store(url, **store_options)
    fp = fingerprint_id(dict(fingerprint))
    tokens = tuple(answer) if answer is not None else (1,) * profile.max_new_tokens
    rows = [ReferenceRow(f"ref{i}", profile.name, fp, f"canary {i}", tokens, 0.0) for i in range(n)]
    if rows:
        store.add_references(rows)
    return store


class CanaryAnswering:
    """A worker for :func:`canary_store` canaries: answers every ``canary <i>`` prompt
    with the store's default answer (``max_new_tokens`` ones) and any other prompt with
    its own random tokens below 258, as an honest node's decoy answers look.

    Args:
        fingerprint: the engine fingerprint it claims (the store's).
        max_new_tokens: tokens per answer (the profile's).
    """

    def __init__(self, fingerprint: Mapping[str, str | int], max_new_tokens: int) -> None:
        self.fingerprint = dict(fingerprint)
        self.tokens = max_new_tokens
        self.rng = random.Random()

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        """One answer per prompt."""
        return [
            [1] * self.tokens
            if p.startswith("canary")
            else [self.rng.randrange(258) for _ in range(self.tokens)]
            for p in prompts
        ]


async def raw_session(
    rc: RunningCoordinator,
    identity: Ed25519PrivateKey,
    claim: ProfileClaim,
    *,
    connector: aiohttp.BaseConnector | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse, Transport]:
    """Open a websocket to ``rc`` and run the handshake by hand (no NodeClient), for tests
    that then cut, stall, replay or forge frames. The caller closes the session.
    ``headers`` go with the upgrade (e.g. ``X-Forwarded-For``).

    Returns:
        ``(http, ws, transport)``: the transport seals and opens the session's frames.
    """
    http = aiohttp.ClientSession(connector=connector)
    ws = await http.ws_connect(rc.url, compress=0, headers=headers)
    hs = NodeHandshake(identity, rc.identity.public_key(), claim)
    await ws.send_bytes(hs.start())
    welcome = await ws.receive(timeout=5.0)
    await ws.send_bytes(hs.receive_welcome(welcome.data))
    return http, ws, hs.transport()


async def serve_until_job(ws: aiohttp.ClientWebSocketResponse, transport: Transport) -> Job:
    """On a :func:`raw_session`: answer echoes like an honest node until a job arrives;
    return it, not acknowledged."""
    while True:
        msg = transport.open((await ws.receive(timeout=8.0)).data)
        if isinstance(msg, Echo):
            await ws.send_bytes(transport.seal(EchoReply(msg.nonce)))
        elif isinstance(msg, Job):
            return msg


async def serve_until_release(
    ws: aiohttp.ClientWebSocketResponse, transport: Transport
) -> tuple[Job, Release]:
    """On a :func:`raw_session`: answer echoes and acknowledge the job like an honest
    node; return the job and the release when the release arrives."""
    job = await serve_until_job(ws, transport)
    await ws.send_bytes(transport.seal(Ack(job.round_id)))
    while True:
        msg = transport.open((await ws.receive(timeout=8.0)).data)
        if isinstance(msg, Echo):
            await ws.send_bytes(transport.seal(EchoReply(msg.nonce)))
        elif isinstance(msg, Release):
            return job, msg


async def walk_raw_to_running(
    session: NodeSession,
    ws: aiohttp.ClientWebSocketResponse,
    transport: Transport,
    round_id: str,
    timeout_s: float = 5.0,
) -> None:
    """Take round ``round_id`` of a :func:`raw_session` to RUNNING on both sides the
    protocol's way (docs/protocol.md §6.2): the coordinator's ``session`` sends a job,
    the raw node acknowledges it, the coordinator sends the release and the raw node
    reads it. The raw node may then send its ``result`` (or ``error``) for the round.

    Raises:
        TimeoutError: a step took longer than ``timeout_s``.
        AssertionError: the raw node read something else than the job or release.
    """
    ack = session.expect_ack(round_id)
    await session.send(Job(round_id, bytes(12), bytes(32), 1, 1, 1.0))
    job = transport.open((await ws.receive(timeout=timeout_s)).data)
    assert isinstance(job, Job) and job.round_id == round_id, job
    await ws.send_bytes(transport.seal(Ack(round_id)))
    await asyncio.wait_for(ack, timeout_s)
    await session.send(Release(round_id, bytes(32)))
    release = transport.open((await ws.receive(timeout=timeout_s)).data)
    assert isinstance(release, Release) and release.round_id == round_id, release


@dataclass
class RunningCoordinator:
    """A coordinator serving on 127.0.0.1 for a test; ``url`` is its websocket URL."""

    coord: Coordinator
    runner: web.AppRunner
    port: int
    identity: Ed25519PrivateKey
    nodes: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{WS_PATH}"

    def node(
        self,
        worker: Worker,
        profile: str,
        identity: Ed25519PrivateKey | None = None,
        *,
        coordinator_key: Ed25519PrivateKey | None = None,
        label: str = "node",
        client_cls: type[NodeClient] = NodeClient,
    ) -> NodeClient:
        """A node client for this coordinator (not started)."""
        return client_cls(
            self.url,
            identity or Ed25519PrivateKey.generate(),
            (coordinator_key or self.identity).public_key(),
            profile,
            worker,
            label=label,
        )

    def start(self, client: NodeClient) -> asyncio.Task[None]:
        """Run a node client in the background until the test ends."""
        task = asyncio.get_running_loop().create_task(client.run_forever())
        self.nodes.append(task)
        return task

    def start_named(
        self,
        workers: Mapping[str, Worker],
        profile: str,
        *,
        client_cls: type[NodeClient] = NodeClient,
    ) -> dict[str, str]:
        """Start one node client per ``name -> worker`` (labelled ``name``); returns
        ``name -> public key text``. Does not wait for the sessions."""
        keys = {}
        for name, worker in workers.items():
            client = self.node(worker, profile, label=name, client_cls=client_cls)
            self.start(client)
            keys[name] = public_key_text(client.identity)
        return keys

    async def wait_connected(self, n: int, timeout_s: float = 30.0) -> None:
        """Wait until ``n`` sessions are registered (bounded wait)."""
        async with asyncio.timeout(timeout_s):
            while len(self.coord.sessions) < n:
                await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running_coordinator(
    tmp_path: Path,
    profiles: Sequence[Profile],
    *,
    allowed: Sequence[Ed25519PrivateKey] = (),
    open_enrollment: bool | None = None,
    store: Store | None = None,
    handshake_timeout_s: float = 5.0,
    request_header_timeout_s: float = 10.0,
    decoy_workers: int = 0,
    storage_retry_s: float = 10.0,
    spool_replay_s: float = 5.0,
) -> AsyncIterator[RunningCoordinator]:
    """Start a coordinator on a free loopback port; stop it and its nodes on exit.

    ``decoy_workers`` defaults to 0 (decoys generated in the planning thread) so that a
    test does not start worker processes unless it is about them. The coordinator's
    spool (docs/spool.md) is ``tmp_path/netcheck-spool.jsonl``."""
    identity = Ed25519PrivateKey.generate()
    cfg = CoordinatorConfig(
        host="127.0.0.1",
        port=0,
        identity_key=tmp_path / "unused.pem",
        allowed_nodes=[public_key_text(k) for k in allowed],
        open_enrollment=(not allowed) if open_enrollment is None else open_enrollment,
        database=f"sqlite:///{tmp_path / 'netcheck.db'}",
        admin_token=secrets.token_urlsafe(24),
        profiles=[p.name for p in profiles],
        handshake_timeout_s=handshake_timeout_s,
        request_header_timeout_s=request_header_timeout_s,
        decoy_workers=decoy_workers,
        storage_retry_s=storage_retry_s,
        spool_replay_s=spool_replay_s,
    )
    store = store or Store(cfg.database)
    coord = Coordinator(cfg, identity, {p.name: p for p in profiles}, store)
    runner = await make_runner(coord)
    site = KernelStampSite(runner, "127.0.0.1", 0)  # as `coordinator serve` does
    await site.start()
    rc = RunningCoordinator(coord, runner, site.port, identity)
    try:
        yield rc
    finally:
        for task in rc.nodes:
            task.cancel()
        await asyncio.gather(*rc.nodes, return_exceptions=True)
        await runner.cleanup()
        store.close()
