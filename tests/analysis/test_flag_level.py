"""The level a shared-backend flag records (netcheck/analysis/evidence.py
``flag_statistic``, the stored threshold) is the per-member level its tests were held to
with the intersection-union rule: a pair run's look level itself, a split-phase pair's
level divided over the split pairs, never the group phase's ``level / (g - 1)``."""

from __future__ import annotations

import math

import numpy as np

from netcheck.analysis.confirm import ConfirmationObservation, ConfirmConfig
from netcheck.analysis.confirm_run import ConfirmationRun
from netcheck.analysis.evidence import flag_statistic


def _drive(run: ConfirmationRun, slow: dict[str, set[str]], seed: int) -> None:
    """Run ``run`` to the end: member m is slowed log 1.0 when one of ``slow[m]`` is loaded
    with it (noise sd 0.05)."""
    rng = np.random.default_rng(seed)
    n = 0
    while not run.done:
        block = []
        for load in run.next_block():
            n += 1
            values = {m: (1.0 if slow[m] & (load - {m}) else 0.0) + rng.normal(0, 0.05)
                      for m in sorted(load)}  # fmt: skip
            block.append(ConfirmationObservation(f"r{n}", frozenset(load), values))
        run.add(block)


def test_a_pair_flag_records_the_look_level_of_both_members() -> None:
    """Pair, attempt 1, alpha 1e-3, 5 doubling looks: each member at 1e-3 / 5 = 2e-4
    (the intersection-union test), and that is the flag's level."""
    run = ConfirmationRun(("a", "b"), 8, 128, ConfirmConfig())
    _drive(run, {"a": {"b"}, "b": {"a"}}, 1)
    assert run.flags == [("a", "b")]
    stat, level = flag_statistic(run, run.flags[0])
    want = 1e-3 * 6 / math.pi**2 / 5
    assert math.isclose(level, want) and math.isclose(run.judge_config().alpha, want)
    assert stat < level


def test_a_split_phase_flag_records_the_pair_level() -> None:
    """Triple {a, b, c} where a and b share a backend and c is honest but slowed with
    both (its own co-host): the flag {a, b} comes from the split phase, whose pair tests
    are held to alpha / 5 looks / 3 pairs (IUT within a pair; one phase's share since
    the group phase raises no flag, ``ConfirmConfig.group_phases``), not the group
    phase's alpha / 5 / (g - 1)."""
    run = ConfirmationRun(("a", "b", "c"), 8, 128, ConfirmConfig())
    _drive(run, {"a": {"b"}, "b": {"a"}, "c": {"a", "b"}}, 2)
    assert run.flags == [("a", "b")]
    _stat, level = flag_statistic(run, run.flags[0])
    split = 1e-3 * 6 / math.pi**2 / 5
    assert math.isclose(level, split / 3)
    assert run.group_result is not None
    assert math.isclose(run.group_result.p_threshold, split / 2)


def test_with_information_spending_a_flag_records_its_look_share() -> None:
    """``look_spending = "information"``: a strong pair passes at the first look, 8 of
    128 cycles, so each member is held to 1e-3 * 6 / pi^2 * 8 / 128, and that is the
    flag's level."""
    run = ConfirmationRun(("a", "b"), 8, 128, ConfirmConfig(look_spending="information"))
    _drive(run, {"a": {"b"}, "b": {"a"}}, 1)
    assert run.flags == [("a", "b")] and len(run.observations) == 8 * 3  # first look
    stat, level = flag_statistic(run, run.flags[0])
    want = 1e-3 * 6 / math.pi**2 * 8 / 128
    assert math.isclose(level, want) and math.isclose(run.judge_config().alpha, want)
    assert stat < level
