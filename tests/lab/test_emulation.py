"""netcheck.lab.emulation: the emulated GPU holds results; overruns are reported."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from netcheck.lab.emulation import EmulatedGPU, EmulatedWorker


class SleepyWorker:
    """A fake engine whose 'real compute' takes ``seconds``."""

    fingerprint: dict[str, str | int] = {"engine": "fake"}

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        await asyncio.sleep(self.seconds)
        return [[len(p)] for p in prompts]


async def test_fast_compute_waits_for_the_emulated_gpu(caplog: pytest.LogCaptureFixture) -> None:
    """Real compute shorter than the emulated service time: no overrun is reported."""
    worker = EmulatedWorker(SleepyWorker(0.0), EmulatedGPU(0.05))
    with caplog.at_level(logging.WARNING):
        assert await worker.run(["ab", "c"]) == [[2], [1]]
    assert worker.overruns == 0
    assert "OVERRUN" not in caplog.text


async def test_slow_compute_is_an_overrun(caplog: pytest.LogCaptureFixture) -> None:
    """Real compute longer than the emulated service time is logged as EMULATION OVERRUN."""
    worker = EmulatedWorker(SleepyWorker(0.2), EmulatedGPU(0.01))
    with caplog.at_level(logging.WARNING):
        assert await worker.run(["x"]) == [[1]]
    assert worker.overruns == 1
    assert "EMULATION OVERRUN" in caplog.text
