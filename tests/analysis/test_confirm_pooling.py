"""Confirmation evidence pooled across attempts, and the futility stop (issue 13, session 4)."""

from __future__ import annotations

import math

import numpy as np

from netcheck.analysis.confirm import ConfirmationObservation, ConfirmConfig
from netcheck.analysis.confirm_run import ConfirmationRun

BETA_HALF = math.log(1.5)  # a pair on one backend with beta = 0.5


def _drive(run: ConfirmationRun, seed: int, sd: float, effect: float, tag: str) -> ConfirmationRun:
    """Run a pair confirmation: co-loaded rounds are ``effect`` slower, noise ``sd``."""
    rng = np.random.default_rng(seed)
    n = 0
    while not run.done:
        block = []
        for load in run.next_block():
            values = {
                m: (effect if len(load) > 1 else 0.0) + float(rng.normal(0, sd)) for m in load
            }
            block.append(ConfirmationObservation(f"{tag}{n}", frozenset(load), values))
            n += 1
        run.add(block)
    return run


def _obs(rid: str, loaded: set[str], value: float = 0.0) -> ConfirmationObservation:
    return ConfirmationObservation(rid, frozenset(loaded), {m: value for m in loaded})


def test_a_noisy_pair_is_confirmed_by_the_evidence_of_two_attempts() -> None:
    """A jittered pair (sd 0.3) that one attempt cannot confirm is confirmed when the
    second attempt judges the first attempt's rounds too; the same second attempt alone
    is not."""
    first = _drive(ConfirmationRun(("a", "b"), 8, 64), 2, 0.3, BETA_HALF, "x")
    assert first.flags == []
    pooled = ConfirmationRun(("a", "b"), 8, 64, attempt=2, prior=tuple(first.observations))
    alone = ConfirmationRun(("a", "b"), 8, 64, attempt=2)
    assert _drive(pooled, 102, 0.3, BETA_HALF, "y").flags == [("a", "b")]
    assert _drive(alone, 102, 0.3, BETA_HALF, "y").flags == []


def test_only_rounds_loading_members_of_the_group_are_pooled() -> None:
    """Earlier rounds that loaded a non-member (another group, a larger group) carry
    other load and are not judged; rounds of the group, a subset or a member alone are."""
    prior = (
        _obs("g", {"a", "b"}), _obs("a", {"a"}), _obs("b", {"b"}),
        _obs("abc", {"a", "b", "c"}), _obs("ax", {"a", "x"}), _obs("x", {"x"}),
    )  # fmt: skip
    run = ConfirmationRun(("a", "b"), prior=prior)
    assert [o.round_id for o in run.prior] == ["g", "a", "b"]
    assert [o.round_id for o in run.judged] == ["g", "a", "b"]
    assert ConfirmationRun(("a", "b"), prior=prior, legacy=True).prior == ()


def test_an_honest_pair_below_the_floor_stops_after_two_looks() -> None:
    """Honest co-hosted GPUs (20% coupling, below the 25% floor) are cleared after two
    looks by the futility stop instead of running every cycle; without it they run to
    the last look; neither raises a flag."""
    coupling = math.log(1.2)
    cfg_off = ConfirmConfig(futility_stop=False)
    stopped = _drive(ConfirmationRun(("a", "b"), 8, 64), 5, 0.05, coupling, "h")
    full = _drive(ConfirmationRun(("a", "b"), 8, 64, cfg=cfg_off), 5, 0.05, coupling, "h")
    assert stopped.flags == [] and full.flags == []
    assert len(stopped.observations) == 2 * 8 * 3
    assert len(full.observations) == 64 * 3


def test_the_futility_stop_never_clears_a_real_pair_that_passes() -> None:
    """A plain pair (beta 0.5, sd 0.05) is confirmed at the first look, futility or not."""
    run = _drive(ConfirmationRun(("a", "b"), 8, 64), 1, 0.05, BETA_HALF, "p")
    assert run.flags == [("a", "b")] and len(run.observations) == 8 * 3
