"""Every prompt of a shipped LLM profile fits its ``prompt_len``: no engine cuts it.

Engines cut a longer prompt from the left (:func:`netcheck.engines.base.encode_prompts`),
which drops the prompt's 60-bit reference and makes two different prompts with the same
tail one engine input: the same honest answer for both, which the result-sharing proof
then took for sharing (s12: 4 false flags in 3 demo rounds on cpu-tiny, prompt_len 64,
prompts up to 120 bytes).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from netcheck.config import Profile, load_profile
from netcheck.config.profile import DEFAULT_PROFILES_DIR
from netcheck.engines.base import encode_prompts
from netcheck.engines.synth import model_cache_dir, write_byte_tokenizer
from netcheck.errors import EngineError
from netcheck.workloads import get_workload

N_PROMPTS = 3000

LLM_PROFILES = sorted(
    path.stem
    for path in DEFAULT_PROFILES_DIR.glob("*.toml")
    if load_profile(path).workload == "llm"
)


def engine_tokenizer(profile: Profile, tmp_path: Path) -> Any:
    """The tokenizer the profile's engines load (``AutoTokenizer`` on the model
    directory), or skip when it is not available here."""
    transformers = pytest.importorskip("transformers")
    if profile.model.startswith("synth:"):  # every preset: the byte-level tokenizer
        write_byte_tokenizer(tmp_path, profile.prompt_len)
        return transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    if profile.model.startswith("package:"):
        from netcheck.engines.packaged import get_packaged_model, packaged_file

        spec = get_packaged_model(profile.model.removeprefix("package:"))
        converted = model_cache_dir() / f"package-{spec.name}"
        if (converted / "tokenizer_config.json").is_file():
            return transformers.AutoTokenizer.from_pretrained(str(converted))
        if importlib.util.find_spec("gguf") is None:
            pytest.skip("reading the packaged GGUF tokenizer needs the gguf package")
        try:
            source = packaged_file(spec)
        except EngineError as exc:
            pytest.skip(str(exc))
        # as convert_packaged_model saves it into the model directory the engines load
        tok = transformers.AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        tok.save_pretrained(str(tmp_path))
        return transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    pytest.skip(f"no local tokenizer for model {profile.model!r}")


@pytest.mark.parametrize("name", LLM_PROFILES)
def test_every_generated_prompt_fits_prompt_len(name: str, tmp_path: Path) -> None:
    """N_PROMPTS prompts of the profile's workload tokenize (``<s>`` included, as the
    engines do) to at most ``prompt_len`` tokens, so ``encode_prompts`` cuts none."""
    profile = load_profile(name)
    tok = engine_tokenizer(profile, tmp_path)
    prompts = get_workload(profile).generator(b"prompt-fit" + name.encode()).prompts(N_PROMPTS)
    ids = tok(prompts, add_special_tokens=True)["input_ids"]
    longest = max(len(row) for row in ids)
    assert longest <= profile.prompt_len, (name, longest, profile.prompt_len)
    assert encode_prompts(tok, prompts, profile.prompt_len) == [list(row) for row in ids]


def test_the_shipped_llm_profiles_are_all_checked() -> None:
    """The parametrisation sees the shipped LLM profiles (a moved folder would skip them)."""
    assert {"cpu-tiny", "cpu-tiny-vllm", "cpu-smollm2"} <= set(LLM_PROFILES)
