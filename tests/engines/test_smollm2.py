"""The engines on a real model: SmolLM2-135M-Instruct (package:smollm2-135m) on the CPU."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from netcheck.config import Profile, load_profile
from netcheck.engines import Engine, load_engine, weight_hash
from netcheck.workloads import PromptGenerator

pytestmark = pytest.mark.slow

B, PROMPT_LEN, NEW = 8, 32, 24


COMMON = {"the", "a", "is", "to", "of", "and", "in", "that", "it", "for", "with", "are"}


def english(text: str) -> bool:
    """At least five words, two of them distinct common English words (random token ids
    decode to word pieces, rarely to several of these)."""
    words = re.findall(r"\b[a-zA-Z]+\b", text.lower())
    return len(words) >= 5 and len(COMMON.intersection(words)) >= 2


@pytest.fixture(scope="module")
def profile(make_profile: Callable[..., Profile]) -> Profile:
    """A small shape on the real model: B=8, 32 prompt tokens, 24 new, one thread."""
    return make_profile(
        "torch",
        model="package:smollm2-135m",
        batch_size=B,
        prompt_len=PROMPT_LEN,
        max_new_tokens=NEW,
        cpu_threads=1,
    )


@pytest.fixture(scope="module")
def engine(profile: Profile, smollm2_dir: Path) -> Iterator[Engine]:
    """The torch engine on the converted SmolLM2 checkpoint, float32."""
    eng = load_engine(profile, model_dir=smollm2_dir)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    """Sixteen generated prompts."""
    return PromptGenerator(2026).prompts(16)


def test_fingerprint_names_the_packaged_model(engine: Engine, smollm2_dir: Path) -> None:
    """model_id is the package reference and weight_hash that of the converted weights."""
    fp = engine.fingerprint
    assert fp["model_id"] == "package:smollm2-135m"
    assert fp["weight_hash"] == weight_hash(smollm2_dir)
    assert fp["cpu_threads"] == 1


def test_real_text_out(engine: Engine, prompts: list[str], smollm2_dir: Path) -> None:
    """The answers decode to English-looking text (a real model, not random tokens)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_dir))
    texts = [tok.decode(row) for row in engine.generate(prompts[:B])]
    assert sum(map(english, texts)) >= B // 2, texts


def test_repeatable_and_batch_invariant(engine: Engine, prompts: list[str]) -> None:
    """The same batch twice gives the same tokens, and a prompt's answer does not depend
    on its position or its batch mates."""
    first = engine.generate(prompts[:B])
    assert engine.generate(prompts[:B]) == first
    other = [*prompts[B : B + 5], prompts[0], *prompts[B + 5 : B + 7]]
    assert engine.generate(other)[5] == first[0]


def test_dtype_cheater_caught_by_the_profiles_canaries(smollm2_dir: Path) -> None:
    """At the cpu-smollm2 shape, a bfloat16 run differs from float32 in at least 8 of 16
    rows of a batch, so k >= canaries_min (6) canaries catch it in a round with
    probability 1 - C(16 - d, k) / C(16, k) >= 0.996. Measured with prompt scheme v2
    over 8 batches of this seed: 9, 9, 11, 10, 10, 11, 11, 11 differing rows (caught
    >= 0.9991 per round); with v1's shorter prompts: 10 and 6 (0.974)."""
    profile = load_profile("cpu-smollm2")
    batches = PromptGenerator(b"div-test").prompts(2 * profile.batch_size)
    batch = batches[profile.batch_size :]  # the batch with fewer differing rows
    with load_engine(profile, model_dir=smollm2_dir) as fp32:
        honest = fp32.generate(batch)
    with load_engine(profile, model_dir=smollm2_dir, dtype="bfloat16") as bf16:
        cheat = bf16.generate(batch)
    differing = sum(a != b for a, b in zip(honest, cheat, strict=True))
    n, k = profile.batch_size, profile.canaries_min
    caught = 1 - math.comb(n - differing, k) / math.comb(n, k)
    assert differing >= 8, differing
    assert caught >= 0.996, caught


def test_vllm_engine_on_the_real_model(
    profile: Profile, smollm2_dir: Path, prompts: list[str]
) -> None:
    """vLLM (CPU build) loads the converted checkpoint: one thread, the package's model id,
    real text out, the same batch twice gives the same tokens."""
    from transformers import AutoTokenizer

    vprofile = profile.model_copy(update={"engine": "vllm"})
    with load_engine(vprofile, model_dir=smollm2_dir) as eng:
        fp = eng.fingerprint
        assert (fp["engine"], fp["model_id"], fp["cpu_threads"]) == (
            "vllm",
            "package:smollm2-135m",
            1,
        )
        first = eng.generate(prompts[:B])
        assert eng.generate(prompts[:B]) == first
    tok = AutoTokenizer.from_pretrained(str(smollm2_dir))
    texts = [tok.decode(row) for row in first]
    assert sum(map(english, texts)) >= B // 2, texts
