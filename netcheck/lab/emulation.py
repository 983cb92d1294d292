"""EMULATION of a GPU's service time, for running many "nodes" on one CPU machine.

:class:`EmulatedGPU` is the service-time model; :class:`EmulatedWorker` wraps a real
worker so that its results come back no earlier than the emulated service time.

This module exists for the demo, tests and the simulation harness. It is never used by
``netcheck node run`` unless ``--emulate-batch-time`` is given, and every log line of an
emulated node says so.

Service-time model (detection.md §1): one batch of B prompts takes ``batch_time_s`` on
the emulated GPU when it runs alone. When n batches share one GPU they are served by
*processor sharing* with batching efficiency ``beta``: each progresses at rate
``1 / (1 + beta * (n - 1))``, so n batches that start together all finish after
``batch_time_s * (1 + beta * (n - 1))``. ``beta = 1`` means no gain from batching
(fully serial throughput); ``beta = 0`` means free extra batches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from netcheck.node.workers import Worker, run_probe


class EmulatedGPU:
    """EMULATION: processor-sharing service-time model of one GPU.

    Args:
        batch_time_s: service time of one batch alone, in seconds (T_ref).
        beta: batching efficiency in [0, 1] (1 = serial).
        tick_s: update period of the emulation, in seconds.

    Raises:
        ValueError: on a negative time or beta outside [0, 1].
    """

    def __init__(self, batch_time_s: float, beta: float = 1.0, tick_s: float = 0.005) -> None:
        if batch_time_s < 0 or not 0.0 <= beta <= 1.0 or tick_s <= 0:
            raise ValueError("need batch_time_s >= 0, 0 <= beta <= 1, tick_s > 0")
        self.batch_time_s = batch_time_s
        self.beta = beta
        self.tick_s = tick_s
        self.active = 0

    def rate(self) -> float:
        """Service rate of each active batch (work-seconds per second)."""
        n = max(self.active, 1)
        return 1.0 / (1.0 + self.beta * (n - 1))

    async def serve(self) -> float:
        """Occupy the emulated GPU for one batch; returns the emulated service time (s)."""
        remaining = self.batch_time_s
        start = last = time.monotonic()
        self.active += 1
        try:
            while remaining > 0:
                await asyncio.sleep(min(self.tick_s, remaining))
                now = time.monotonic()
                remaining -= (now - last) * self.rate()
                last = now
        finally:
            self.active -= 1
        return time.monotonic() - start


class EmulatedWorker:
    """EMULATION: real inference, then the emulated GPU's service time.

    The result is returned when both the real computation and the emulated service
    (:meth:`EmulatedGPU.serve`) are done, i.e. at ``max(real, emulated)`` after release.
    """

    def __init__(self, inner: Worker, gpu: EmulatedGPU) -> None:
        self.inner = inner
        self.gpu = gpu

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return self.inner.fingerprint

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        outputs, _ = await asyncio.gather(self.inner.run(prompts), self.gpu.serve())
        return outputs

    async def probe(self, challenge: bytes) -> bytes:
        """Passed through to the inner worker, with no emulated service time (the probe
        is tiny; the emulation models batches)."""
        return await run_probe(self.inner, challenge)
