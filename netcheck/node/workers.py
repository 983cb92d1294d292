"""What a node does with a released batch: a :class:`Worker` turns B prompts into B outputs.

- :class:`EngineWorker` — the real thing: runs the local inference engine. This is what
  ``netcheck node run`` uses unless told otherwise.

Emulated GPU service time and demo adversaries are lab code (:mod:`netcheck.lab.emulation`,
:mod:`netcheck.lab.adversary`); they reach a node only through the worker factory that
:func:`netcheck.node.app.run_node` takes.

A worker may also answer the known-answer compute probe (docs/protocol.md §5.9) with an
``async probe(challenge) -> bytes`` method (:class:`ProbingWorker`); :func:`run_probe`
falls back to the CPU reference for workers without one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from netcheck.engines import probe as probe_mod
from netcheck.engines.base import Engine
from netcheck.errors import EngineError


class Worker(Protocol):
    """Runs one batch. ``fingerprint`` is what the node *claims* in its handshake."""

    @property
    def fingerprint(self) -> dict[str, str | int]: ...

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        """Return B outputs of exactly ``max_new_tokens`` token ids each.

        Raises:
            EngineError: the engine failed.
        """
        ...


@runtime_checkable
class ProbingWorker(Protocol):
    """A worker that runs the compute probe itself (on its engine's device)."""

    async def probe(self, challenge: bytes) -> bytes:
        """The 32-byte known answer for ``challenge`` (:mod:`netcheck.engines.probe`).

        Raises:
            EngineError: the device failed.
        """
        ...


async def run_probe(worker: object, challenge: bytes) -> bytes:
    """Answer a probe with ``worker.probe`` if it has one, else the CPU reference in a
    thread (workers without a device, e.g. test fakes).

    Raises:
        EngineError: the probe failed.
    """
    if isinstance(worker, ProbingWorker):
        return await worker.probe(challenge)
    try:
        return await asyncio.to_thread(probe_mod.answer, challenge)
    except ValueError as exc:
        raise EngineError(f"probe failed: {exc}") from exc


class EngineWorker:
    """Runs batches on a local engine in a worker thread (one batch at a time)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return dict(self.engine.fingerprint)

    def _generate(self, prompts: Sequence[str], abandoned: threading.Event) -> list[list[int]]:
        with self._lock:
            if abandoned.is_set():  # its session ended while it waited for the engine
                raise EngineError("batch abandoned before it started")
            return self.engine.generate(list(prompts))

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        """Run one batch in a thread, after the batches before it. A call cancelled
        while its batch still waits for the engine (the session ended: its tasks are
        cancelled) skips the batch, so a new session's batches do not queue behind a
        dead session's; a batch already running cannot be stopped and runs to its end."""
        abandoned = threading.Event()
        try:
            return await asyncio.to_thread(self._generate, prompts, abandoned)
        except asyncio.CancelledError:
            abandoned.set()
            raise

    async def probe(self, challenge: bytes) -> bytes:
        """The probe on the engine's device, in a thread. It does not wait for a running
        batch (no lock): it is tiny, and its round trip must not include batch time."""
        return await asyncio.to_thread(self.engine.probe, challenge)
