"""DEMO ADVERSARIES: cheating node behaviours, used by ``netcheck demo`` and tests.

Each one is a :class:`~netcheck.node.workers.Worker` that *claims* the honest engine
fingerprint of its profile but does something cheaper:

- ``wrong-dtype`` (:func:`wrong_dtype_worker`): runs the right model in another dtype
  (e.g. bfloat16 instead of float32) and lies about it in its fingerprint.
- ``made-up`` (:class:`MadeUpWorker`): returns random tokens of the right shape.
- ``proxy`` (:class:`ProxyWorker`): forwards every batch, and every compute probe, to
  a shared backend (:mod:`netcheck.lab.backend`) that also serves other identities.
- padding (:class:`PaddingWorker`, tests and ``benchmarks/gpu_e2e.py`` only): holds
  every answer back to a fixed time (the shared card's worst case), or to just before
  the deadline its job names (read through :class:`JobDeadlineClient`), so that
  co-loading never shows while the card keeps up.
- selective (:class:`SharedBackend`, :class:`SelectiveWorker`, ``benchmarks/gpu_e2e.py``
  only): identities of one backend; the surplus identity gives its batch up (reports an
  engine error: ``missing``) whenever another identity of the backend is busy, and
  answers honestly alone.
- jitter (:class:`JitterWorker`, tests and ``benchmarks/gpu_e2e.py`` only): holds every
  answer back by a random share of its own compute time, the simulator's ``jitter``
  adversary (``netcheck.lab.sim.population``) on a real engine.

They are reachable only through the hidden ``--adversary`` option of ``netcheck node
run``; they exist so that the demo and the tests can show cheaters being caught.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import aiohttp

from netcheck.config import Profile
from netcheck.engines import load_engine
from netcheck.errors import EngineError
from netcheck.node.client import NodeClient
from netcheck.node.workers import EngineWorker, run_probe

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


#: The deadline (seconds from release) of the job whose batch the current task runs, as
#: the coordinator's ``job`` message names it; set by :class:`JobDeadlineClient` for the
#: task of each job (None outside one).
JOB_DEADLINE_S: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "netcheck_lab_job_deadline_s", default=None
)


class JobDeadlineClient(NodeClient):
    """A :class:`~netcheck.node.client.NodeClient` that lets its worker read the deadline
    of the job it runs (:data:`JOB_DEADLINE_S`, set in the job's own task): the ``job``
    message tells every node its deadline (``Job.deadline_s``, a hint), so a cheating
    node can use it; the node package itself never passes it to a worker."""

    async def _run_job(self, session: Any, job: Any, prompts: list[str]) -> None:
        token = JOB_DEADLINE_S.set(float(job.deadline_s))
        try:
            await super()._run_job(session, job, prompts)
        finally:
            JOB_DEADLINE_S.reset(token)


class PaddingWorker:
    """A padding farm identity: runs ``inner`` (one identity's share of a card) and holds
    the answer back, so that its time does not depend on which other identities of the
    card are loaded.

    Hold rule (seconds after the batch arrived, i.e. after ``run`` was called):

    - ``hold_s`` given: hold to ``hold_s`` (a fixed time, e.g. the card's worst case);
    - ``hold_s`` None (*hold to the deadline*, the cleverest padder): hold to
      ``D - max(safety_frac * D, safety_s)``, ``D`` the deadline of the job being run
      as its ``job`` message names it (:data:`JOB_DEADLINE_S`, set by
      :class:`JobDeadlineClient`), else ``deadline_s`` (e.g. ``Profile.deadline_s`` at the
      node's RTT). Alone, every answer arrives just inside the deadline, as slow as it
      may be without a strike; co-loaded, the compute alone (``t(2)`` about 1.9-2.1
      ``t(1)`` on an H200) may already be past the target, and the answer then leaves
      as soon as it is computed (never held back further).

    Raises:
        ValueError: neither ``hold_s`` nor ``deadline_s`` given, a negative ``hold_s``,
            a ``deadline_s`` that is not positive, ``safety_frac`` outside [0, 1) or a
            negative ``safety_s``.
    """

    def __init__(
        self,
        inner: Any,
        hold_s: float | None = None,
        *,
        deadline_s: float | None = None,
        safety_frac: float = 0.05,
        safety_s: float = 0.1,
    ) -> None:
        if hold_s is None and deadline_s is None:
            raise ValueError("PaddingWorker needs hold_s or deadline_s")
        if hold_s is not None and hold_s < 0:
            raise ValueError(f"hold_s must be >= 0, got {hold_s}")
        if deadline_s is not None and not deadline_s > 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        if not 0 <= safety_frac < 1:
            raise ValueError(f"safety_frac must be in [0, 1), got {safety_frac}")
        if safety_s < 0:
            raise ValueError(f"safety_s must be >= 0, got {safety_s}")
        self.inner = inner
        self.hold_s = hold_s
        self.deadline_s = deadline_s
        self.safety_frac = safety_frac
        self.safety_s = safety_s

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return dict(self.inner.fingerprint)

    def target_s(self) -> float:
        """Seconds after arrival to which the current batch's answer is held (the rule
        in the class docstring; >= 0)."""
        if self.hold_s is not None:
            return self.hold_s
        d = JOB_DEADLINE_S.get()
        if d is None:
            d = self.deadline_s
        assert d is not None  # the constructor requires one of the two
        return max(0.0, d - max(self.safety_frac * d, self.safety_s))

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        start = time.monotonic()
        target = self.target_s()
        outputs: list[list[int]] = await self.inner.run(prompts)
        await asyncio.sleep(max(0.0, target - (time.monotonic() - start)))
        return outputs

    async def probe(self, challenge: bytes) -> bytes:
        """The inner worker's probe (on its device; the CPU reference if it has none).

        Raises:
            EngineError: the probe failed.
        """
        return await run_probe(self.inner, challenge)


class SharedBackend:
    """DEMO ADVERSARY (lab): one backend (``inner``, e.g. an
    :class:`~netcheck.node.workers.EngineWorker` on one card) serving several node
    identities in one process, which knows which of them are busy (a counter per
    identity name, updated on the event loop). Identities reach it through
    :meth:`identity` (an honest-looking view) or :class:`SelectiveWorker`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._busy: Counter[str] = Counter()

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return dict(self.inner.fingerprint)

    def busy(self, *, besides: str = "") -> list[str]:
        """Names of the identities running a batch now, ``besides`` left out (sorted)."""
        return sorted(n for n, c in self._busy.items() if c > 0 and n != besides)

    async def run_for(self, name: str, prompts: Sequence[str]) -> list[list[int]]:
        """Run ``prompts`` for identity ``name``, marked busy meanwhile.

        Raises:
            EngineError: the backend failed.
        """
        self._busy[name] += 1
        try:
            outputs: list[list[int]] = await self.inner.run(prompts)
            return outputs
        finally:
            self._busy[name] -= 1

    def identity(self, name: str) -> BackendIdentity:
        """A worker for identity ``name`` that runs every batch on this backend."""
        return BackendIdentity(self, name)


class BackendIdentity:
    """One identity of a :class:`SharedBackend`: runs every batch there (marked busy)."""

    def __init__(self, backend: SharedBackend, name: str) -> None:
        self.backend = backend
        self.name = name

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return self.backend.fingerprint

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        return await self.backend.run_for(self.name, prompts)

    async def probe(self, challenge: bytes) -> bytes:
        """The backend's probe (on its device; the CPU reference if it has none).

        Raises:
            EngineError: the probe failed.
        """
        return await run_probe(self.backend.inner, challenge)


class SelectiveWorker(BackendIdentity):
    """A *selective* farm identity, the surplus one of a :class:`SharedBackend`: it waits
    ``settle_s`` seconds after its batch arrived (the releases of one round reach the
    backend's identities within milliseconds of each other on one host), then, if
    another identity of the backend is busy, gives the batch up: it raises
    :class:`~netcheck.errors.EngineError`, so the node reports an engine error and the
    coordinator records ``missing`` at once, without loading the card (a silent drop
    would hold the round until ``result_timeout_s``). Alone it answers honestly (its
    time is the backend's plus ``settle_s``). ``given_up``/``answered``: counts.

    Raises:
        ValueError: a negative ``settle_s``.
    """

    def __init__(self, backend: SharedBackend, name: str, settle_s: float = 0.2) -> None:
        if settle_s < 0:
            raise ValueError(f"settle_s must be >= 0, got {settle_s}")
        super().__init__(backend, name)
        self.settle_s = settle_s
        self.given_up = 0
        self.answered = 0

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        await asyncio.sleep(self.settle_s)
        others = self.backend.busy(besides=self.name)
        if others:
            self.given_up += 1
            raise EngineError(f"backend busy ({', '.join(others)}): batch given up")
        outputs = await self.backend.run_for(self.name, prompts)
        self.answered += 1
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
