"""Tests for netcheck.engines.vllm_engine: real vLLM (CPU build) on the tiny model."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from netcheck.config import Profile
from netcheck.engines import Engine, load_engine, weight_hash
from netcheck.engines.fingerprint import FINGERPRINT_KEYS
from netcheck.engines.vllm_engine import kv_cache_bytes
from netcheck.errors import EngineError
from netcheck.workloads import PromptGenerator

pytestmark = pytest.mark.slow

B, PROMPT_LEN, NEW = 8, 64, 16


@pytest.fixture(scope="module")
def engine(model_cache: Path, make_profile: Callable[..., Profile]) -> Iterator[Engine]:
    """One vLLM engine for the module: tiny, float32, B=8, 64 prompt tokens, 16 new."""
    eng = load_engine(make_profile("vllm"))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    """Thirty-two generated prompts."""
    return PromptGenerator(77).prompts(32)


def test_shape_and_types(engine: Engine, prompts: list[str]) -> None:
    """generate returns B lists of exactly max_new_tokens Python ints in the vocab."""
    out = engine.generate(prompts[:B])
    assert len(out) == B
    for row in out:
        assert len(row) == NEW
        assert all(type(t) is int and 0 <= t < 258 for t in row)


def test_repeatable(engine: Engine, prompts: list[str]) -> None:
    """The same batch twice gives identical tokens."""
    assert engine.generate(prompts[:B]) == engine.generate(prompts[:B])


def test_mixed_batch_invariance(engine: Engine, prompts: list[str]) -> None:
    """A prompt's output does not depend on its position or its batch mates."""
    first = engine.generate(prompts[:B])
    other = [*prompts[B : B + 3], prompts[0], *prompts[B + 3 : B + 7]]
    second = engine.generate(other)
    assert second[3] == first[0]


def test_outputs_depend_on_prompt(engine: Engine, prompts: list[str]) -> None:
    """At least 90% of the outputs in a batch are distinct (no collapse)."""
    out = engine.generate(prompts[2 * B : 3 * B])
    assert len({tuple(r) for r in out}) >= 0.9 * B


def test_left_truncation(engine: Engine, prompts: list[str]) -> None:
    """Prompts longer than prompt_len keep <s> and their last prompt_len-1 bytes."""
    tail = "y" * 10 + "Only the last sixty-three bytes of a long prompt reach the model."
    batch = prompts[:B]
    batch[2] = "Head one. " * 30 + tail
    batch[6] = "A second, longer head. " * 12 + tail
    out = engine.generate(batch)
    assert out[2] == out[6]


def test_wrong_batch_size(engine: Engine, prompts: list[str]) -> None:
    """A batch of the wrong size raises EngineError before reaching vLLM."""
    for bad in (prompts[: B - 1], prompts[: B + 1]):
        with pytest.raises(EngineError, match="exactly 8"):
            engine.generate(bad)


def test_fingerprint(engine: Engine, model_cache: Path) -> None:
    """The fingerprint names the vLLM version, the model, its hash and the shape."""
    import vllm

    fp = engine.fingerprint
    assert tuple(fp) == FINGERPRINT_KEYS
    assert (fp["engine"], fp["engine_version"]) == ("vllm", f"vllm-{vllm.__version__}")
    assert (fp["model_id"], fp["weight_hash"]) == ("synth:tiny", weight_hash(model_cache / "tiny"))
    assert (fp["dtype"], fp["device"], fp["decoding"]) == ("float32", "cpu", "greedy")
    assert (fp["batch_size"], fp["prompt_len"], fp["max_new_tokens"]) == (B, PROMPT_LEN, NEW)


def test_other_dtype_and_model(
    engine: Engine, prompts: list[str], make_profile: Callable[..., Profile]
) -> None:
    """bfloat16 and tiny-alt engines have other fingerprints (and tiny-alt other tokens)."""
    reference = engine.generate(prompts[:B])
    with load_engine(make_profile("vllm"), dtype="bfloat16") as bf16:
        assert bf16.fingerprint["dtype"] == "bfloat16"
        assert bf16.fingerprint_id != engine.fingerprint_id
        assert len(bf16.generate(prompts[:B])) == B
    with load_engine(make_profile("vllm", model="synth:tiny-alt")) as alt:
        assert alt.fingerprint["weight_hash"] != engine.fingerprint["weight_hash"]
        assert alt.fingerprint_id != engine.fingerprint_id
        assert alt.generate(prompts[:B]) != reference


def test_cpu_threads_after_a_default_engine(
    engine: Engine, prompts: list[str], make_profile: Callable[..., Profile]
) -> None:
    """A profile's cpu_threads holds even after a default engine in this process bound its
    own threads (and replaced torch.set_num_threads); the count is in the fingerprint."""
    import torch

    with load_engine(make_profile("vllm", cpu_threads=1)) as one:
        assert one.fingerprint["cpu_threads"] == 1
        assert torch.get_num_threads() == 1
        assert one.fingerprint_id != engine.fingerprint_id
        here = one.generate(prompts[:B])
        assert [len(r) for r in here] == [NEW] * B
        # OpenMP's thread count is per calling thread: a batch answered from a new thread
        # (the demo's reference builders, asyncio.to_thread) must run the same team size.
        # Before the fix vLLM's CPU attention failed there: "thread_num == thread_num (2 vs. 1)".
        there: list[object] = []
        worker = threading.Thread(target=lambda: there.append(_try(one, prompts[:B])))
        worker.start()
        worker.join()
        assert there == [here]


def _try(engine: Engine, batch: list[str]) -> object:
    try:
        return engine.generate(batch)
    except EngineError as exc:
        return exc


def test_kv_cache_bytes(model_cache: Path) -> None:
    """The KV-cache budget covers B full sequences and is at least 64 MiB."""
    tiny = model_cache / "tiny"
    assert kv_cache_bytes(tiny, "float32", 8, 80) == 64 << 20
    big = kv_cache_bytes(tiny, "float32", 1024, 1024)
    assert big >= 1024 * 1024 * 2 * 2 * 4 * 64 * 4
    assert kv_cache_bytes(tiny, "bfloat16", 1024, 1024) * 2 == big
