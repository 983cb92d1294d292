"""Tests for netcheck.analysis.confirm: confirmation rounds and the relay test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netcheck.analysis.confirm import (
    CLEARED,
    SHARED_BACKEND,
    ConfirmationObservation,
    judge_confirmation,
    plan_confirmation,
    relay_excess,
)


def _observe(group: list[str], coupling: float, seed: int) -> list[ConfirmationObservation]:
    """Confirmation rounds where co-loading slows each member by ``coupling``."""
    rng = np.random.default_rng(seed)
    out = []
    for r, load in enumerate(plan_confirmation(group, 6)):
        slow = math.log(1 + coupling) if len(load) > 1 else 0.0
        values = {m: math.log(2.0) + slow + rng.normal(0, 0.05) for m in load}
        out.append(ConfirmationObservation(f"c{r}", frozenset(load), values))
    return out


def test_plan_interleaves_group_and_alone_rounds() -> None:
    """Each cycle loads the group, then each member alone."""
    assert plan_confirmation(["a", "b"], 2) == [{"a", "b"}, {"a"}, {"b"}] * 2
    with pytest.raises(ValueError):
        plan_confirmation(["a"], 3)


def test_confirms_a_farm() -> None:
    """A 1.5x co-loaded slowdown (beta = 0.5) confirms a shared backend."""
    res = judge_confirmation(["a", "b"], _observe(["a", "b"], 0.5, seed=1))
    assert res.verdict == SHARED_BACKEND and res.confirmed_members == ("a", "b")
    assert res.beta_estimate == pytest.approx(0.5, abs=0.1)


def test_clears_honest_cohosted_pair() -> None:
    """A 3% benign coupling is below the effect floor: cleared."""
    res = judge_confirmation(["a", "b"], _observe(["a", "b"], 0.03, seed=2))
    assert res.verdict == CLEARED and res.confirmed_members == ()


def test_relay_flags_30ms_not_2ms() -> None:
    """A persistent +30 ms probe excess is a relay; +2 ms is not."""
    rng = np.random.default_rng(3)
    echo = list(0.040 + rng.exponential(0.002, 40))
    for extra, flagged in ((0.030, True), (0.002, False)):
        probe = [e + 0.010 + extra + rng.normal(0, 0.001) for e in echo]
        res = relay_excess(probe, echo, ref_probe_s=0.010)
        assert res.flagged is flagged
        assert res.median_excess_s == pytest.approx(extra, abs=0.002)
