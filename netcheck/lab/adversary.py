"""DEMO ADVERSARIES: cheating node behaviours, used by ``netcheck demo`` and tests.

Each one is a :class:`~netcheck.node.workers.Worker` that *claims* the honest engine
fingerprint of its profile but does something cheaper:

- ``wrong-dtype`` (:func:`wrong_dtype_worker`): runs the right model in another dtype
  (e.g. bfloat16 instead of float32) and lies about it in its fingerprint.
- ``made-up`` (:class:`MadeUpWorker`): returns random tokens of the right shape.
- ``proxy`` (:class:`ProxyWorker`): forwards every batch, and every compute probe, to
  a shared backend (:mod:`netcheck.lab.backend`) that also serves other identities.
- padding (:class:`PaddingWorker`, tests only): holds every answer back to a fixed
  time, the shared card's worst case, so that co-loading never shows.
- jitter (:class:`JitterWorker`, tests and ``benchmarks/gpu_e2e.py`` only): holds every
  answer back by a random share of its own compute time, the simulator's ``jitter``
  adversary (``netcheck.lab.sim.population``) on a real engine.

They are reachable only through the hidden ``--adversary`` option of ``netcheck node
run``; they exist so that the demo and the tests can show cheaters being caught.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from netcheck.config import Profile
from netcheck.engines import load_engine
from netcheck.errors import EngineError
from netcheck.node.workers import EngineWorker

ADVERSARIES = ("wrong-dtype", "made-up", "proxy")


class ClaimingWorker(EngineWorker):
    """Runs an engine but claims another fingerprint."""

    def __init__(self, engine: object, claimed: dict[str, str | int]) -> None:
        super().__init__(engine)  # type: ignore[arg-type]
        self._claimed = dict(claimed)

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return dict(self._claimed)


def wrong_dtype_worker(profile: Profile, dtype: str = "bfloat16") -> ClaimingWorker:
    """Load the profile's model in ``dtype`` but claim the profile's own dtype."""
    engine = load_engine(profile, dtype=dtype)
    claimed = dict(engine.fingerprint, dtype=profile.dtype)
    return ClaimingWorker(engine, claimed)


class MadeUpWorker:
    """Returns random tokens of the right shape; claims the honest fingerprint."""

    def __init__(self, fingerprint: dict[str, str | int], max_new_tokens: int, vocab: int = 258):
        self._fingerprint = dict(fingerprint)
        self.max_new_tokens = max_new_tokens
        self.vocab = vocab
        self._rng = random.Random()

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return dict(self._fingerprint)

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        return [
            [self._rng.randrange(self.vocab) for _ in range(self.max_new_tokens)] for _ in prompts
        ]


class ProxyWorker:
    """Forwards batches to a shared backend over HTTP (JSON, loopback)."""

    def __init__(self, backend_url: str, fingerprint: dict[str, str | int]) -> None:
        self.backend_url = backend_url.rstrip("/")
        self._fingerprint = dict(fingerprint)

    @classmethod
    async def connect(cls, backend_url: str, timeout_s: float = 300.0) -> ProxyWorker:
        """Ask the backend for the fingerprint it runs (waiting while it starts), claim it.

        Raises:
            EngineError: the backend did not answer within ``timeout_s`` seconds.
        """
        url = backend_url.rstrip("/") + "/fingerprint"
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as http:
            while True:
                try:
                    async with http.get(url) as resp:
                        resp.raise_for_status()
                        return cls(backend_url, await resp.json())
                except aiohttp.ClientError as exc:
                    if time.monotonic() > deadline:
                        raise EngineError(f"shared backend {url} not reachable: {exc}") from exc
                await asyncio.sleep(0.5)

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return dict(self._fingerprint)

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.post(self.backend_url + "/generate", json={"prompts": list(prompts)}) as resp,
            ):
                resp.raise_for_status()
                body = await resp.json()
        except aiohttp.ClientError as exc:
            raise EngineError(f"shared backend unreachable: {exc}") from exc
        return [list(map(int, o)) for o in body["outputs"]]

    async def probe(self, challenge: bytes) -> bytes:
        """Forward the compute probe to the backend (``POST /probe``), where the GPU is:
        the probe's round trip then includes the leg to the backend (the relay test).

        Raises:
            EngineError: the backend is unreachable or answered badly.
        """
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.post(self.backend_url + "/probe", json={"challenge": challenge.hex()}) as resp,
            ):
                resp.raise_for_status()
                body = await resp.json()
            return bytes.fromhex(body["answer"])
        except (aiohttp.ClientError, ValueError, KeyError, TypeError) as exc:
            raise EngineError(f"shared backend probe failed: {exc}") from exc


class PaddingWorker:
    """A padding farm identity: runs ``inner`` (e.g. an EMULATED share of one GPU) and
    holds the answer back until ``hold_s`` seconds after the batch arrived, whatever the
    load, so that its time never depends on which other identities are loaded."""

    def __init__(self, inner: Any, hold_s: float) -> None:
        self.inner = inner
        self.hold_s = hold_s

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return dict(self.inner.fingerprint)

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        start = time.monotonic()
        outputs: list[list[int]] = await self.inner.run(prompts)
        await asyncio.sleep(max(0.0, self.hold_s - (time.monotonic() - start)))
        return outputs


class JitterWorker:
    """A jittering farm identity: runs ``inner`` and then holds the answer back so that
    its time is the compute time ``t`` times ``exp(log_sd * |z|)``, ``z ~ N(0, 1)``
    drawn per batch (the simulator's ``jitter`` adversary, ``jitter_log_sd`` 0.3 there):
    random delays meant to blur the contention between identities of one backend.
    ``seed``: the random generator's seed (None: from the OS)."""

    def __init__(self, inner: Any, log_sd: float = 0.3, seed: int | None = None) -> None:
        if log_sd < 0:
            raise ValueError(f"log_sd must be >= 0, got {log_sd}")
        self.inner = inner
        self.log_sd = log_sd
        self._rng = random.Random(seed)

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return dict(self.inner.fingerprint)

    def factor(self) -> float:
        """The next batch's time factor ``exp(log_sd * |z|)`` (>= 1)."""
        return math.exp(self.log_sd * abs(self._rng.gauss(0.0, 1.0)))

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        start = time.monotonic()
        outputs: list[list[int]] = await self.inner.run(prompts)
        spent = time.monotonic() - start
        await asyncio.sleep(spent * (self.factor() - 1.0))
        return outputs
