"""EMULATION of a GPU's service time, for running many "nodes" on one CPU machine.

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
