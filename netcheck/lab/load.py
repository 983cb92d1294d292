"""Load and fault-test support: lightweight EMULATED nodes over real signed sessions.

Used by ``scripts/loadgen``, ``scripts/bench`` and ``tests/faults``. Sessions are real
(websocket, handshake, encrypted frames, signed receipts); only the *engine* is
emulated, so thousands of nodes fit on one CPU:

- :class:`HashWorker` — **EMULATION**: claims :data:`FAKE_FINGERPRINT` and answers every
  prompt with :func:`hash_answer` (a deterministic function of the prompt) after an
  emulated service time. References built with :func:`add_hash_references` use the same
  function, so a HashWorker node passes its canary checks exactly as an honest node.
- :class:`LoadClient` — a :class:`~netcheck.node.client.NodeClient` that stamps when its
  handshake completed (for handshake-rate benchmarks).
- ``python -m netcheck.lab.load nodes ...`` — a *client host* process that runs many such
  nodes (see :func:`main`); the load generator starts a few of them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import resource
import secrets
import signal
import struct
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from netcheck.config import Profile
from netcheck.keys import load_private_key, parse_public_key
from netcheck.node.client import NodeClient
from netcheck.node.serving import OpenSession
from netcheck.storage import ReferenceRow, Store

log = logging.getLogger("netcheck.lab.load")

#: The engine fingerprint every emulated node claims (no real engine has it).
FAKE_FINGERPRINT: dict[str, str | int] = {
    "engine": "emulated-hash",
    "model_id": "load:hash",
    "weight_hash": "00" * 32,
}
VOCAB = 258


def hash_answer(prompt: str, max_new_tokens: int, vocab: int = VOCAB) -> tuple[int, ...]:
    """The emulated engine's output for ``prompt``: ``max_new_tokens`` ids from SHAKE-128
    (2 bytes per id, or 4 when ``vocab`` exceeds 65,536)."""
    w = 2 if vocab <= 65536 else 4
    raw = hashlib.shake_128(prompt.encode()).digest(w * max_new_tokens)
    words = struct.unpack(f"<{max_new_tokens}{'H' if w == 2 else 'I'}", raw)  # little-endian
    return tuple(x % vocab for x in words)


class HashWorker:
    """EMULATION: deterministic outputs (:func:`hash_answer`) after ``delay_s`` seconds.

    Args:
        max_new_tokens: output length per prompt.
        delay_s: emulated GPU service time per batch (``asyncio.sleep``; no CPU used).
        fingerprint: the engine fingerprint claimed in the handshake.
        vocab: token ids are drawn from ``[0, vocab)``; 128,256 (a Llama-3 vocabulary)
            makes most ids 5 msgpack bytes, so results are as large as real ones.
    """

    def __init__(
        self,
        max_new_tokens: int,
        delay_s: float = 0.0,
        fingerprint: dict[str, str | int] | None = None,
        vocab: int = VOCAB,
    ) -> None:
        self.vocab = vocab
        self.max_new_tokens = max_new_tokens
        self.delay_s = delay_s
        self._fingerprint = dict(fingerprint or FAKE_FINGERPRINT)
        self.batches = 0

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return dict(self._fingerprint)

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)
        self.batches += 1
        return [list(hash_answer(p, self.max_new_tokens, self.vocab)) for p in prompts]


def add_hash_references(
    store: Store,
    profile: Profile,
    count: int,
    *,
    fingerprint: dict[str, str | int] | None = None,
    tag: str | None = None,
    vocab: int = VOCAB,
) -> int:
    """Store ``count`` references answered by :func:`hash_answer` (ids in
    ``[0, vocab)``, as :class:`HashWorker` with the same ``vocab``); returns rows added."""
    from netcheck.engines.fingerprint import fingerprint_id

    fp_id = fingerprint_id(fingerprint or FAKE_FINGERPRINT)
    tag = tag or secrets.token_hex(4)
    now = time.time()
    added = 0
    for start in range(0, count, 5000):
        rows = []
        for i in range(start, min(count, start + 5000)):
            prompt = f"reference {tag} {i}: what follows the number {i * 7919 % 100003}?"
            answer = hash_answer(prompt, profile.max_new_tokens, vocab)
            rows.append(
                ReferenceRow(f"h{tag}-{i:07d}", profile.name, fp_id, prompt, answer, now + i * 1e-6)
            )
        added += store.add_references(rows)
    return added


class LoadClient(NodeClient):
    """A node client that records when its (first) handshake completed
    (``time.monotonic()`` seconds)."""

    handshake_done_at: float | None = None

    async def _handshake(self, ws: aiohttp.ClientWebSocketResponse) -> OpenSession:
        session = await super()._handshake(ws)
        if self.handshake_done_at is None:
            self.handshake_done_at = time.monotonic()
        return session


def env_with_code(code: Path | str) -> dict[str, str]:
    """This process's environment with ``code`` (a checkout) first on ``PYTHONPATH``.

    Entries already there stay behind it: on the device machine they hold the carried
    wheels, and a child that lost them failed to import (bench_timing, then
    bench_release_floor's writers: "a writer process exited")."""
    old = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), *([old] if old else [])])}


async def sink_server(
    n: int, path: str = "/"
) -> tuple[web.AppRunner, list[web.WebSocketResponse], asyncio.Event]:
    """A plain aiohttp websocket server (no netcheck code, uncompressed) that keeps every
    session it accepts on ``path`` and discards what they send: the release-skew floor
    the benchmarks compare against. Returns the set-up runner (add a site), the list of
    accepted sessions and an event set once ``n`` are in."""
    conns: list[web.WebSocketResponse] = []
    all_in = asyncio.Event()

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(compress=False)
        await ws.prepare(request)
        conns.append(ws)
        if len(conns) == n:
            all_in.set()
        async for _ in ws:
            pass
        return ws

    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    return runner, conns, all_in


def raise_fd_limit(want: int = 65536) -> int:
    """Raise RLIMIT_NOFILE's soft limit towards ``want`` (capped by the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def source_address(index: int, per_address: int = 100) -> tuple[str, int]:
    """A loopback source address for node ``index``: ``per_address`` nodes per address, so
    the coordinator's per-address handshake rate limit is not hit by a load test."""
    block = index // per_address
    return (f"127.{1 + block // 250}.{block % 250}.1", 0)


async def run_nodes(
    url: str,
    coordinator_key: Ed25519PublicKey,
    profile: str,
    max_new_tokens: int,
    count: int,
    *,
    delay_s: float = 0.0,
    first_index: int = 0,
    identities: Sequence[Ed25519PrivateKey] = (),
    stop: asyncio.Event | None = None,
    report: Path | None = None,
) -> list[LoadClient]:
    """Run ``count`` emulated nodes until ``stop`` is set (or forever).

    Every node connects at once (the handshake benchmark measures that burst). When all
    are connected, a JSON line ``{"connected": n, "first_start": t, "last_handshake": t}``
    is written to ``report`` (if given); the times are ``time.monotonic()`` seconds
    (CLOCK_MONOTONIC: comparable between processes on one host, immune to wall-clock
    steps; only differences mean anything).
    """
    stop = stop or asyncio.Event()
    clients = [
        LoadClient(
            url,
            identities[i] if i < len(identities) else Ed25519PrivateKey.generate(),
            coordinator_key,
            profile,
            HashWorker(max_new_tokens, delay_s),
            label=f"load-{first_index + i}",
            local_addr=source_address(first_index + i),
        )
        for i in range(count)
    ]
    started = time.monotonic()
    tasks = [asyncio.create_task(c.run_forever(stop)) for c in clients]
    if report is not None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not stop.is_set():
            done = [c.handshake_done_at for c in clients if c.handshake_done_at is not None]
            if len(done) == count:
                line = {"connected": count, "first_start": started, "last_handshake": max(done)}
                report.write_text(json.dumps(line) + "\n")
                break
            await asyncio.sleep(0.05)
    await stop.wait()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return clients


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m netcheck.lab.load nodes ...``: a client host running many emulated nodes."""
    ap = argparse.ArgumentParser(prog="python -m netcheck.lab.load", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("nodes", help="run COUNT emulated nodes until SIGTERM/SIGINT")
    p.add_argument("--url", required=True)
    p.add_argument("--coordinator-key", required=True, help="ed25519:... public key")
    p.add_argument("--profile", required=True)
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--delay", type=float, default=0.0, help="EMULATED service time (s)")
    p.add_argument("--first-index", type=int, default=0)
    p.add_argument("--key-file", type=Path, action="append", default=[])
    p.add_argument("--report", type=Path)
    p.add_argument("--log-level", default="WARNING")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    raise_fd_limit()

    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_nodes(
            args.url,
            parse_public_key(args.coordinator_key),
            args.profile,
            args.max_new_tokens,
            args.count,
            delay_s=args.delay,
            first_index=args.first_index,
            identities=[load_private_key(k) for k in args.key_file],
            stop=stop,
            report=args.report,
        )

    asyncio.run(go())
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "FAKE_FINGERPRINT",
    "HashWorker",
    "LoadClient",
    "add_hash_references",
    "hash_answer",
    "main",
    "raise_fd_limit",
    "run_nodes",
    "source_address",
]
