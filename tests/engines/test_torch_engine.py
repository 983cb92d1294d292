"""Tests for netcheck.engines.torch_engine on the tiny synthetic model (CPU)."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from netcheck.config import Profile
from netcheck.engines import Engine, load_engine, weight_hash
from netcheck.engines.fingerprint import FINGERPRINT_KEYS
from netcheck.errors import EngineError
from netcheck.workloads import PromptGenerator

pytestmark = pytest.mark.slow

B, PROMPT_LEN, NEW = 8, 64, 16


@pytest.fixture(scope="module")
def engine(model_cache: Path, make_profile: Callable[..., Profile]) -> Iterator[Engine]:
    """The torch engine on tiny, float32, B=8, 64 prompt tokens, 16 new tokens."""
    eng = load_engine(make_profile("torch"))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    """Thirty-two generated prompts."""
    return PromptGenerator(2024).prompts(32)


def test_shape_and_types(engine: Engine, prompts: list[str]) -> None:
    """generate returns B lists of exactly max_new_tokens Python ints in the vocab."""
    out = engine.generate(prompts[:B])
    assert len(out) == B
    for row in out:
        assert len(row) == NEW
        assert all(type(t) is int and 0 <= t < 258 for t in row)
    assert (engine.batch_size, engine.prompt_len, engine.max_new_tokens) == (B, PROMPT_LEN, NEW)


def test_repeatable(engine: Engine, prompts: list[str]) -> None:
    """The same batch twice gives identical tokens."""
    assert engine.generate(prompts[:B]) == engine.generate(prompts[:B])


def test_mixed_batch_invariance(engine: Engine, prompts: list[str]) -> None:
    """A prompt's output does not depend on its position or its batch mates."""
    first = engine.generate(prompts[:B])
    canary = prompts[0]
    other = [*prompts[B + 1 : B + 6], canary, *prompts[B + 6 : B + 8]]
    second = engine.generate(other)
    assert second[5] == first[0]


def test_outputs_depend_on_prompt(engine: Engine, prompts: list[str]) -> None:
    """At least 90% of the outputs in a batch are distinct (no collapse)."""
    out = engine.generate(prompts[B : 2 * B])
    assert len({tuple(r) for r in out}) >= 0.9 * B


def test_left_truncation(engine: Engine, prompts: list[str]) -> None:
    """Prompts longer than prompt_len keep <s> and their last prompt_len-1 bytes."""
    tail = "x" * 10 + "The end of a long prompt is what the model sees here, always."
    assert len(tail.encode()) >= PROMPT_LEN - 1
    batch = prompts[:B]
    batch[0] = "First head. " * 20 + tail
    batch[1] = "Another, different head! " * 9 + tail
    out = engine.generate(batch)
    assert out[0] == out[1]


def test_wrong_batch_size(engine: Engine, prompts: list[str]) -> None:
    """Too few or too many prompts, a bare string or non-strings raise EngineError."""
    for bad in (prompts[: B - 1], prompts[: B + 1], []):
        with pytest.raises(EngineError, match="exactly 8"):
            engine.generate(bad)
    with pytest.raises(EngineError):
        engine.generate("x" * B)
    with pytest.raises(EngineError):
        engine.generate([*prompts[: B - 1], 7])  # type: ignore[list-item]


def test_fingerprint(engine: Engine, model_cache: Path) -> None:
    """The fingerprint names torch+transformers, the model, its hash and the shape."""
    import torch
    import transformers

    fp = engine.fingerprint
    assert tuple(fp) == (*FINGERPRINT_KEYS, "cpu_threads")  # a CPU engine records its threads
    assert fp["engine"] == "torch"
    assert (
        fp["engine_version"] == f"torch-{torch.__version__}+transformers-{transformers.__version__}"
    )
    assert fp["model_id"] == "synth:tiny"
    assert fp["weight_hash"] == weight_hash(model_cache / "tiny")
    assert (fp["dtype"], fp["device"], fp["decoding"]) == ("float32", "cpu", "greedy")
    assert (fp["batch_size"], fp["prompt_len"], fp["max_new_tokens"]) == (B, PROMPT_LEN, NEW)
    assert len(engine.fingerprint_id) == 64


def test_dtype_changes_fingerprint_and_tokens(
    engine: Engine, prompts: list[str], make_profile: Callable[..., Profile]
) -> None:
    """A bfloat16 engine (the 'wrong dtype' adversary) has another fingerprint and answers."""
    with load_engine(make_profile("torch"), dtype="bfloat16") as bf16:
        assert bf16.fingerprint["dtype"] == "bfloat16"
        assert bf16.fingerprint_id != engine.fingerprint_id
        assert bf16.generate(prompts[:B]) != engine.generate(prompts[:B])


def test_model_changes_fingerprint_and_tokens(
    engine: Engine, prompts: list[str], make_profile: Callable[..., Profile]
) -> None:
    """Another synthetic model (tiny-alt) has another fingerprint and other answers."""
    with load_engine(make_profile("torch", model="synth:tiny-alt")) as alt:
        fp = alt.fingerprint
        assert fp["model_id"] == "synth:tiny-alt"
        assert fp["weight_hash"] != engine.fingerprint["weight_hash"]
        assert alt.fingerprint_id != engine.fingerprint_id
        assert alt.generate(prompts[:B]) != engine.generate(prompts[:B])


def test_model_dir_override(
    engine: Engine, model_cache: Path, prompts: list[str], make_profile: Callable[..., Profile]
) -> None:
    """load_engine(model_dir=...) uses that directory and names it from its synth info."""
    with load_engine(
        make_profile("torch", model="synth:small"), model_dir=model_cache / "tiny"
    ) as e:
        assert e.fingerprint == engine.fingerprint
        assert e.generate(prompts[:B]) == engine.generate(prompts[:B])


def test_load_errors(tmp_path: Path, make_profile: Callable[..., Profile]) -> None:
    """Unknown engines, missing directories and bad shapes raise EngineError."""
    with pytest.raises(EngineError, match="unknown engine"):
        load_engine(types.SimpleNamespace(engine="onnx", model="synth:tiny"))  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="does not exist"):
        load_engine(make_profile("torch", model=str(tmp_path / "nope")))
    with pytest.raises(EngineError, match="no \\*.safetensors"):
        load_engine(make_profile("torch", model=str(tmp_path)))
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(EngineError, match="CUDA"):
            load_engine(make_profile("torch", device="cuda"))
