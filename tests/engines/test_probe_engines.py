"""The compute probe in engines and workers (netcheck/engines/probe.py, §5.9): every
engine and worker path gives the CPU reference answer."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from netcheck.config import Profile
from netcheck.engines import load_engine, probe
from netcheck.engines.factoring_engine import FactoringEngine
from netcheck.errors import EngineError
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.emulation import EmulatedGPU, EmulatedWorker
from netcheck.node.workers import EngineWorker, run_probe

CHALLENGES = [bytes([i]) * 32 for i in range(3)] + [os.urandom(32) for _ in range(5)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_answer_on_cpu_matches_numpy(dtype: str) -> None:
    """torch in each profile dtype computes the reference bytes exactly (CPU here; the
    same integer arithmetic on a GPU)."""
    torch = pytest.importorskip("torch")
    for c in CHALLENGES:
        got = probe.torch_answer(torch, torch.device("cpu"), getattr(torch, dtype), c)
        assert got == probe.answer(c)


def test_default_engine_probe_and_workers() -> None:
    """Engine.probe (numpy default), EngineWorker, EmulatedWorker and the fallback for
    workers without a probe all give the reference; a bad challenge is EngineError."""
    eng = FactoringEngine(batch_size=2, prompt_len=24)
    c = CHALLENGES[-1]
    assert eng.probe(c) == probe.answer(c)
    with pytest.raises(EngineError):
        eng.probe(b"short")

    async def go() -> None:
        worker = EngineWorker(eng)
        assert await worker.probe(c) == probe.answer(c)
        emulated = EmulatedWorker(worker, EmulatedGPU(batch_time_s=5.0))
        assert await asyncio.wait_for(emulated.probe(c), 1.0) == probe.answer(c)  # no 5 s
        assert await run_probe(MadeUpWorker({}, 2), c) == probe.answer(c)
        with pytest.raises(EngineError):
            await run_probe(MadeUpWorker({}, 2), b"short")

    asyncio.run(go())


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_engine_probe(
    model_cache: Path, make_profile: Callable[..., Profile], dtype: str
) -> None:
    """TorchEngine.probe runs on its device in its dtype and gives the reference."""
    pytest.importorskip("transformers")
    eng = load_engine(make_profile("torch", dtype=dtype))
    try:
        for c in CHALLENGES[:3]:
            assert eng.probe(c) == probe.answer(c)
    finally:
        eng.close()
