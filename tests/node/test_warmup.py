"""A node warms its engine up before it joins, and says when the card is too slow."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest
from node_support import OFFLINE_URL, node_config

from netcheck.config import DeadlineParams
from netcheck.lab.testing import small_profile
from netcheck.node.app import run_node
from netcheck.node.warmup import assess, warm_up
from netcheck.node.workers import EngineWorker, Worker

PROFILE = small_profile("warm", deadline=DeadlineParams(t_ref_s=1.0, a=1.5, slack_s=0.5))


class FakeEngine:
    """Records every batch it is given (what EngineWorker needs of an engine)."""

    fingerprint = {"engine": "fake", "weight_hash": "44" * 32}

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def generate(self, prompts: Sequence[str]) -> list[list[int]]:
        self.batches.append(list(prompts))
        return [[1] * PROFILE.max_new_tokens for _ in prompts]


class Recording:
    """A worker whose batches take a set time (wall clock) and are recorded."""

    fingerprint = FakeEngine.fingerprint

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.batches: list[list[str]] = []

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        self.batches.append(list(prompts))
        await asyncio.sleep(self.seconds)
        return [[1] * PROFILE.max_new_tokens for _ in prompts]


async def test_warm_up_runs_full_batches_of_fresh_prompts() -> None:
    """``batches`` batches of B distinct fresh prompts of the profile's workload, each
    timed; 0 batches runs nothing."""
    worker = Recording(0.05)
    times = await warm_up(worker, PROFILE, 3)
    assert len(times) == 3 and all(t >= 0.04 for t in times)
    assert [len(b) for b in worker.batches] == [PROFILE.batch_size] * 3
    prompts = [p for b in worker.batches for p in b]
    assert len(set(prompts)) == len(prompts) and all(p.startswith("Ref ") for p in prompts)
    assert await warm_up(Recording(0.0), PROFILE, 0) == ()


@pytest.mark.parametrize(
    ("batch_s", "level", "text"),
    [
        ((3.0, 1.0), logging.INFO, "warm-up batches took 3.00, 1.00 s (t_ref 1.00 s"),
        ((1.0, 1.3), logging.WARNING, "the last is 1.30x the profile's reference batch time"),
        ((2.5, 2.1), logging.ERROR, "over the profile's deadline of 2.00 s"),
        ((2.5,), logging.WARNING, "a first batch carries one-time costs"),
        ((1.1,), logging.INFO, "warm-up batches took 1.10 s"),
        ((), logging.INFO, "no warm-up batch"),
    ],
)
def test_assess_compares_the_last_batch_with_t_ref_and_deadline(
    batch_s: tuple[float, ...], level: int, text: str
) -> None:
    """Only the last (warm) batch counts: ERROR over the deadline at zero RTT (every
    round late), WARNING over 1.2 x t_ref, else INFO; a lone batch is the cold one, so
    over the deadline it is only a WARNING (an H200's first batch is 1.24x a warm one)."""
    result = assess(batch_s, PROFILE)
    assert result.level == level and text in result.message


@pytest.mark.parametrize("warmup", [0, 2])
async def test_node_warms_up_the_engine_before_joining(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, warmup: int
) -> None:
    """``netcheck node run`` runs ``warmup_batches`` batches on the real-engine worker
    after it loads (before the client starts) and logs how long they took."""
    engine = FakeEngine()

    async def make_worker(profile: object) -> Worker:
        return EngineWorker(engine)  # type: ignore[arg-type]

    caplog.set_level(logging.INFO, logger="netcheck")
    task = asyncio.create_task(
        run_node(node_config(tmp_path, OFFLINE_URL, warmup_batches=warmup), make_worker)
    )
    async with asyncio.timeout(20):
        # the client's own lines ("cannot reach coordinator", "reconnecting in"): the
        # preflight's warning also says "retrying", and comes before the warm-up
        while (
            "cannot reach coordinator" not in caplog.text and "reconnecting in" not in caplog.text
        ):
            await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(engine.batches) == warmup
    assert ("warm-up batches took" in caplog.text) == (warmup > 0)
