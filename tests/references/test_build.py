"""Tests for netcheck.references.build.build_references with a fake engine."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pytest

from netcheck.config import Profile, load_profile
from netcheck.engines.fingerprint import Fingerprint, fingerprint_id
from netcheck.errors import EngineError
from netcheck.references.build import build_references
from netcheck.storage import Store


class FakeEngine:
    """Answers each prompt with tokens derived from its hash; records batch sizes."""

    def __init__(self, profile: Profile, *, batch_size: int | None = None, short: bool = False):
        self.batch_size = batch_size or profile.batch_size
        self.max_new_tokens = profile.max_new_tokens
        self.short = short
        self.batches: list[int] = []
        self.fingerprint: Fingerprint = {
            "engine": "fake",
            "batch_size": self.batch_size,
            "prompt_len": profile.prompt_len,
            "max_new_tokens": profile.max_new_tokens,
        }

    def generate(self, prompts: Sequence[str]) -> list[list[int]]:
        self.batches.append(len(prompts))
        n = self.max_new_tokens - (1 if self.short else 0)
        return [list((hashlib.sha512(p.encode()).digest() * 4)[:n]) for p in prompts]


@pytest.fixture
def profile() -> Profile:
    return load_profile("cpu-tiny")


def test_batches_of_exactly_b(profile: Profile) -> None:
    """count is rounded up to a multiple of B; every generate call gets exactly B prompts."""
    engine = FakeEngine(profile)
    store = Store("sqlite://")
    calls: list[tuple[int, int]] = []
    n = build_references(
        profile, engine, store, 20, seed=1, progress=lambda d, t: calls.append((d, t))
    )
    assert n == 32 and engine.batches == [16, 16]
    assert calls == [(16, 32), (32, 32)]
    fp_id = fingerprint_id(engine.fingerprint)
    assert store.count_references() == 32 == store.count_references(fp_id, unspent_only=True)


def test_rows_hold_prompt_answer_and_fingerprint(profile: Profile) -> None:
    """Stored rows carry the profile name, the engine's fingerprint id and exact answers."""
    engine = FakeEngine(profile)
    store = Store("sqlite://")
    build_references(profile, engine, store, 16, seed=b"s")
    fp_id = fingerprint_id(engine.fingerprint)
    rows = store.unspent_canaries(fp_id, 100)
    assert len(rows) == 16 and len({r.prompt for r in rows}) == 16
    assert len({r.ref_id for r in rows}) == 16
    for r in rows:
        assert r.profile == "cpu-tiny" and r.fingerprint_id == fp_id and r.spent_round is None
        assert list(r.answer) == engine.generate([r.prompt])[0]


def test_seeded_prompts_repeat(profile: Profile) -> None:
    """The same seed gives the same prompts (ids stay unique)."""
    a, b = Store("sqlite://"), Store("sqlite://")
    fp_id = fingerprint_id(FakeEngine(profile).fingerprint)
    build_references(profile, FakeEngine(profile), a, 16, seed=5)
    build_references(profile, FakeEngine(profile), b, 16, seed=5)
    prompts_a = sorted(r.prompt for r in a.unspent_canaries(fp_id, 100))
    assert prompts_a == sorted(r.prompt for r in b.unspent_canaries(fp_id, 100))


def test_engine_mismatch_refused(profile: Profile) -> None:
    """An engine with another batch size or wrong output length is refused."""
    store = Store("sqlite://")
    with pytest.raises(EngineError, match="batch size 8 != profile batch size 16"):
        build_references(profile, FakeEngine(profile, batch_size=8), store, 16, seed=1)
    with pytest.raises(EngineError, match=f"not {profile.max_new_tokens} tokens long"):
        build_references(profile, FakeEngine(profile, short=True), store, 16, seed=1)
    assert store.count_references() == 0
    with pytest.raises(ValueError):
        build_references(profile, FakeEngine(profile), store, 0)
