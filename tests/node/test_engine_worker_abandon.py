"""EngineWorker: a batch whose caller was cancelled while it waited for the engine (its
session ended: the session's tasks are cancelled) is skipped. Before: cancelling the
awaiting task left its thread queued on the engine lock, so every batch of a dead
session still ran, one after another, ahead of the next session's batches (up to
MAX_JOBS_IN_FLIGHT of them: minutes of GPU time, and late verdicts)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from netcheck.node.workers import EngineWorker


class BlockingEngine:
    """generate() blocks until ``go`` is set; counts its calls."""

    fingerprint: dict[str, str | int] = {"engine": "fake"}

    def __init__(self) -> None:
        self.go = threading.Event()
        self.started = threading.Event()
        self.calls = 0

    def generate(self, prompts: Sequence[str]) -> list[list[int]]:
        self.calls += 1
        self.started.set()
        self.go.wait(10)
        return [[1] for _ in prompts]


async def test_a_cancelled_batch_waiting_for_the_engine_is_skipped() -> None:
    engine = BlockingEngine()
    worker = EngineWorker(engine)  # type: ignore[arg-type]
    running = asyncio.create_task(worker.run(["a"]))
    await asyncio.to_thread(engine.started.wait, 5)  # the first batch holds the engine
    waiting = asyncio.create_task(worker.run(["b"]))
    await asyncio.sleep(0.2)  # its thread now waits for the engine lock
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)  # cancelled; its thread waits on
    engine.go.set()
    assert await running == [[1]]
    await asyncio.sleep(0.3)  # the abandoned thread takes the lock and returns
    assert engine.calls == 1
    after = await worker.run(["c"])  # the engine serves the next batch at once
    assert after == [[1]] and engine.calls == 2
