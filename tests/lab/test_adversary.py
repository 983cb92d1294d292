"""``netcheck.lab.adversary.JitterWorker``: the simulator's jitter adversary on a real
worker (its time factor and the hold it adds)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence

import pytest

from netcheck.lab.adversary import JitterWorker


class Sleeper:
    """A worker that computes for ``s`` seconds."""

    fingerprint = {"engine": "test"}

    def __init__(self, s: float) -> None:
        self.s = s

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        await asyncio.sleep(self.s)
        return [[1] for _ in prompts]


def test_factors_are_the_simulators_half_normal_jitter() -> None:
    w = JitterWorker(Sleeper(0.0), log_sd=0.3, seed=7)
    logs = [math.log(w.factor()) / 0.3 for _ in range(4000)]  # |z|
    assert min(logs) >= 0.0
    mean = sum(logs) / len(logs)
    assert abs(mean - math.sqrt(2 / math.pi)) < 0.05  # E|z| = sqrt(2/pi)
    a, b = (JitterWorker(Sleeper(0.0), log_sd=0.3, seed=7) for _ in range(2))
    assert [a.factor() for _ in range(3)] == [b.factor() for _ in range(3)]  # seeded


def test_the_answer_is_held_back_by_its_factor_of_the_compute_time() -> None:
    w = JitterWorker(Sleeper(0.2), log_sd=0.3, seed=3)
    expected = JitterWorker(Sleeper(0.2), log_sd=0.3, seed=3).factor()
    t = time.monotonic()
    out = asyncio.run(w.run(["a", "b"]))
    took = time.monotonic() - t
    assert out == [[1], [1]] and w.fingerprint == {"engine": "test"}
    assert took >= 0.2 * expected - 0.01  # never earlier than its factor allows
    assert expected > 1.0


def test_negative_log_sd_is_refused() -> None:
    with pytest.raises(ValueError, match="log_sd"):
        JitterWorker(Sleeper(0.0), log_sd=-0.1)
