"""Confirmation evidence pooled across attempts, and the futility stop (issue 13, session 4)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from netcheck.analysis.confirm import ConfirmationObservation, ConfirmConfig
from netcheck.analysis.confirm_run import ConfirmationRun

BETA_HALF = math.log(1.5)  # a pair on one backend with beta = 0.5


def _drive(
    run: ConfirmationRun, seed: int, sd: float, effect: float, tag: str, shift: float = 0.0
) -> ConfirmationRun:
    """Run a pair confirmation: co-loaded rounds are ``effect`` slower, noise ``sd``,
    every round ``shift`` slower (the host now)."""
    rng = np.random.default_rng(seed)
    n = 0
    while not run.done:
        block = []
        for load in run.next_block():
            values = {
                m: (effect if len(load) > 1 else 0.0) + shift + float(rng.normal(0, sd))
                for m in load
            }
            block.append(ConfirmationObservation(f"{tag}{n}", frozenset(load), values))
            n += 1
        run.add(block)
    return run


def _obs(rid: str, loaded: set[str], phase: str = "group", tested: set[str] | None = None,
         value: float = 0.0) -> ConfirmationObservation:  # fmt: skip
    return ConfirmationObservation(rid, frozenset(loaded), {m: value for m in loaded}, phase,
                                   frozenset(tested if tested is not None else loaded))  # fmt: skip


def test_only_balanced_strata_of_the_group_are_pooled() -> None:
    """Earlier rounds count when their block tested this group or a pair of it (so each
    member has co-loaded and alone rounds from the same time); member-alone rounds of
    another group's run, the alone stage's rounds (one node tested) and unmarked
    rounds do not; nothing with the legacy behaviour."""
    ab = {"a", "b"}
    prior = (
        _obs("g", ab), _obs("a", {"a"}, tested=ab), _obs("b", {"b"}, tested=ab),
        _obs("s", ab, "split", {"a", "b", "c"}), _obs("sa", {"a"}, "split", {"a", "b", "c"}),
        _obs("abc", {"a", "b", "c"}), _obs("oa", {"a"}, tested={"a", "c"}),
        _obs("alone", {"a"}), _obs("old", {"b"}, "", set()),
    )  # fmt: skip
    run = ConfirmationRun(("a", "b"), prior=prior)
    assert [o.round_id for o in run.prior] == ["g", "a", "b"]
    assert [o.round_id for o in run._group_strata()] == ["g", "a", "b"]
    triple = ConfirmationRun(("a", "b", "c"), prior=prior)
    assert [o.round_id for o in triple._pair_strata(frozenset(ab))] == ["g", "a", "b", "s", "sa"]
    assert ConfirmationRun(("a", "b"), prior=prior, legacy=True).prior == ()


def test_alone_rounds_from_another_time_do_not_confirm_an_honest_pair() -> None:
    """An honest co-hosted pair (20% coupling, below the floor) whose host is 10% slower
    now than when many earlier alone-only rounds were taken (other groups' member-alone
    rounds, the alone stage): those rounds are not pooled, so the drift cannot pass
    for contention; pooled naively they confirm the pair."""
    rng = np.random.default_rng(3)
    coupling, drift = math.log(1.2), math.log(1.1)
    old = tuple(
        ConfirmationObservation(
            f"o{m}{i}",
            frozenset({m}),
            {m: float(rng.normal(0, 0.03))},
            "group",
            frozenset({m, "z"}),
        )  # fmt: skip
        for i in range(200)
        for m in ("a", "b")
    )
    run = _drive(ConfirmationRun(("a", "b"), 8, 64, prior=old), 4, 0.03, coupling, "n",
                 shift=drift)  # fmt: skip
    assert run.prior == () and run.flags == []
    naive = [replace(o, tested=frozenset({"a", "b"})) for o in old]
    fooled = _drive(ConfirmationRun(("a", "b"), 8, 64, prior=tuple(naive)), 4, 0.03, coupling,
                    "n", shift=drift)  # fmt: skip
    assert fooled.flags == [("a", "b")]


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
