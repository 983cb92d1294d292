"""Tests for netcheck.engines.factoring_engine (Pollard rho, deterministic)."""

from __future__ import annotations

import pytest

from netcheck.engines.factoring_engine import FactoringEngine, factor_pair, prime_factors
from netcheck.engines.selftest import reshaped_engine
from netcheck.errors import EngineError
from netcheck.workloads.factoring import SemiprimeGenerator


def test_prime_factors() -> None:
    """Small, square, prime and mixed inputs factor correctly."""
    assert prime_factors(2**10 * 3 * 999983) == [2] * 10 + [3, 999983]
    assert prime_factors(1_000_003 * 1_000_003) == [1_000_003, 1_000_003]
    assert factor_pair(2**61 - 1) == [1, 2**61 - 1]
    assert factor_pair(1_000_003 * 1_000_033) == [1_000_003, 1_000_033]
    with pytest.raises(ValueError):
        prime_factors(1)


def test_engine_is_deterministic_and_batch_invariant() -> None:
    """Same answers on repeat, at another position, and at another batch size."""
    items = SemiprimeGenerator(9).items(12)
    eng = FactoringEngine(batch_size=8, prompt_len=24)
    first = eng.generate([it.prompt for it in items[:8]])
    assert first == [list(it.answer or ()) for it in items[:8]]
    assert eng.generate([it.prompt for it in items[:8]]) == first
    mixed = [it.prompt for it in items[4:12]]
    assert eng.generate(mixed)[:4] == first[4:]
    small = reshaped_engine(eng, 2)
    assert small.generate([items[0].prompt, items[1].prompt]) == first[:2]
    assert eng.fingerprint["engine"] == "factoring" and small.fingerprint["batch_size"] == 2


def test_engine_rejects_bad_input() -> None:
    """Non-numbers, too-long inputs, tiny n and max_new_tokens != 2 raise EngineError."""
    eng = FactoringEngine(batch_size=2, prompt_len=24)
    for bad in (["12", "abc"], ["12", "1" * 30], ["12", "3"], ["12", "-15"]):
        with pytest.raises(EngineError):
            eng.generate(bad)
    with pytest.raises(EngineError, match="max_new_tokens"):
        FactoringEngine(batch_size=2, prompt_len=24, max_new_tokens=3)
