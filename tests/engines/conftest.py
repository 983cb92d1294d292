"""Shared fixtures for engine tests: a private synthetic-model cache, test profiles."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from netcheck.config import DeadlineParams, Profile
from netcheck.engines import ensure_synth_model


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private NETCHECK_MODEL_CACHE (set for one test module) with tiny and tiny-alt."""
    root = tmp_path_factory.mktemp("models")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NETCHECK_MODEL_CACHE", str(root))
        ensure_synth_model("tiny")
        ensure_synth_model("tiny-alt")
        yield root


def _make_profile(engine: str, **overrides: object) -> Profile:
    """A small test profile: tiny model, B=8, 64 prompt tokens, 16 new tokens."""
    fields: dict[str, object] = {
        "name": f"test-{engine}",
        "engine": engine,
        "model": "synth:tiny",
        "dtype": "float32",
        "device": "cpu",
        "batch_size": 8,
        "prompt_len": 64,
        "max_new_tokens": 16,
        "deadline": DeadlineParams(t_ref_s=1.0),
    }
    fields.update(overrides)
    return Profile.model_validate(fields)


@pytest.fixture(scope="session")
def make_profile() -> Callable[..., Profile]:
    """Factory for small test profiles: ``make_profile(engine, **field_overrides)``."""
    return _make_profile


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """package:smollm2-135m converted once per test session into a private cache."""
    from netcheck.engines.packaged import ensure_packaged_model

    return ensure_packaged_model("smollm2-135m", cache_dir=tmp_path_factory.mktemp("packaged"))
