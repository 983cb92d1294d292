"""The per-member level of confirmation (intersection-union test) and the doubling looks
(netcheck/analysis/confirm.py ``ConfirmConfig.member_level`` / ``look_schedule``,
netcheck/analysis/confirm_run.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netcheck.analysis.confirm import (
    ConfirmationObservation,
    ConfirmConfig,
    judge_confirmation,
    plan_confirmation,
)
from netcheck.analysis.confirm_run import ConfirmationRun

FLOOR = math.log(1.25)


def _rounds(
    slowdowns: dict[str, float], cycles: int, rng: np.random.Generator, sd: float = 0.1
) -> list[ConfirmationObservation]:
    """Confirmation rounds of the group ``slowdowns`` (member -> co-loaded log slowdown)."""
    group = list(slowdowns)
    out = []
    for r, load in enumerate(plan_confirmation(group, cycles)):
        values = {
            m: (slowdowns[m] if len(load) > 1 else 0.0) + rng.normal(0, sd) for m in sorted(load)
        }
        out.append(ConfirmationObservation(f"c{r}", frozenset(load), values))
    return out


def test_member_level_is_alpha_for_a_pair_and_alpha_over_g_minus_1_for_groups() -> None:
    """IUT: a pair's members are each tested at alpha; g members at alpha / (g - 1);
    the session-4 rule split alpha over all g."""
    cfg = ConfirmConfig(alpha=1e-3)
    assert cfg.member_alpha(2) == pytest.approx(1e-3)
    assert cfg.member_alpha(3) == pytest.approx(5e-4)
    assert cfg.member_alpha(5) == pytest.approx(2.5e-4)
    old = ConfirmConfig(alpha=1e-3, member_level="bonferroni")
    assert old.member_alpha(2) == pytest.approx(5e-4)
    with pytest.raises(ValueError, match="member_level"):
        ConfirmConfig(member_level="holm")


@pytest.mark.parametrize(
    ("slowdowns", "label"),
    [
        ({"a": FLOOR, "b": FLOOR}, "pair, both at the floor"),
        ({"a": FLOOR, "b": 1.0}, "pair, one member far above the floor"),
        ({"a": FLOOR, "b": FLOOR, "c": 1.0}, "triple, one member far above the floor"),
    ],
)
def test_groups_at_the_null_boundary_are_confirmed_at_most_alpha(
    slowdowns: dict[str, float], label: str
) -> None:
    """Under the least favourable null (members exactly at the floor, up to one far
    above it) the group is confirmed in at most alpha of the runs, and the level is
    used (the rate is not the session-4 half): 4,000 simulated groups at alpha 0.05."""
    rng = np.random.default_rng(11)
    cfg = ConfirmConfig(alpha=0.05)
    hits = sum(
        judge_confirmation(tuple(slowdowns), _rounds(slowdowns, 10, rng), cfg).verdict
        == "shared-backend"
        for _ in range(4000)
    )
    rate = hits / 4000
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000), label
    if any(v > FLOOR for v in slowdowns.values()):
        assert rate > 0.035, label  # measured 0.047 (pair), 0.046 (triple); Bonferroni
        # over all g members (session 4): 0.023, 0.028


def test_doubling_looks_come_at_8_16_32_64_128_cycles() -> None:
    """Blocks of 8, 8, 16, 32, 64 cycles (5 looks to 128); a cap that is not a power of
    two ends the last block at the cap; constant looks stay every ``cycles``."""
    run = ConfirmationRun(("a", "b"), 8, 128, ConfirmConfig())
    assert run.looks == 5
    sizes = [run._cumulative(j + 1) - run._cumulative(j) for j in range(run.looks)]
    assert sizes == [8, 8, 16, 32, 64]
    odd = ConfirmationRun(("a", "b"), 8, 100, ConfirmConfig())
    assert odd.looks == 5 and odd._cumulative(5) == 100
    flat = ConfirmationRun(("a", "b"), 8, 64, ConfirmConfig(look_schedule="constant"))
    assert flat.looks == 8 and flat.block_cycles() == 8


def test_a_run_takes_doubling_blocks_until_it_confirms() -> None:
    """Driven like the coordinator drives it: the blocks a pair gets double, and a real
    farm pair (beta 0.5, noise sd 0.22: flagged in 195 of 200 seeds, always after 3+
    looks) is confirmed after a later, larger look; members drawn in sorted order so the
    draw does not depend on the set's hash order."""
    rng = np.random.default_rng(3)
    run = ConfirmationRun(("a", "b"), 8, 128, ConfirmConfig())
    blocks = []
    while not run.done:
        load = run.next_block()
        blocks.append(len(load) // 3)
        slow = {"a": math.log(1.5), "b": math.log(1.5)}
        obs = []
        for r, members in enumerate(load):
            values = {m: (slow[m] if len(members) > 1 else 0.0) + rng.normal(0, 0.22)
                      for m in sorted(members)}  # fmt: skip
            obs.append(ConfirmationObservation(f"r{len(blocks)}-{r}", frozenset(members), values))
        run.add(obs)
    assert blocks == [8, 8, 16, 32, 64][: len(blocks)] and len(blocks) >= 3
    assert run.flags == [("a", "b")]


def test_whole_runs_at_the_floor_are_confirmed_at_most_alpha() -> None:
    """The level split over the doubling looks holds the run's error at alpha: 600 pair
    runs with both members exactly at the floor, alpha 0.1."""
    rng = np.random.default_rng(5)
    hits = 0
    for i in range(600):
        run = ConfirmationRun(("a", "b"), 4, 32, ConfirmConfig(alpha=0.1))
        while not run.done:
            load = run.next_block()
            obs = [
                ConfirmationObservation(
                    f"r{i}-{len(run.observations)}-{r}", frozenset(m),
                    {k: (FLOOR if len(m) > 1 else 0.0) + rng.normal(0, 0.1) for k in sorted(m)},
                )
                for r, m in enumerate(load)
            ]  # fmt: skip
            run.add(obs)
        hits += bool(run.flags)
    assert hits / 600 <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / 600)


def test_a_group_of_three_gives_its_split_phase_the_whole_level() -> None:
    """The group phase of 3+ members raises no flag (it selects the members to split),
    so each phase's looks get the attempt's whole level; group_phases=2 halves it
    (sessions 4-5a)."""
    run = ConfirmationRun(("a", "b", "c"), 8, 128, ConfirmConfig(alpha=1e-3))
    assert run.phases == 1
    assert run.judge_config().alpha == pytest.approx(run.alpha * run.look_share(1))
    old = ConfirmationRun(("a", "b", "c"), 8, 128, ConfirmConfig(alpha=1e-3, group_phases=2))
    assert old.judge_config().alpha == pytest.approx(run.judge_config().alpha / 2)
    with pytest.raises(ValueError, match="group_phases"):
        ConfirmConfig(group_phases=3)


def test_look_shares_follow_the_cycles_each_look_adds_and_sum_to_one() -> None:
    """Information spending: looks at 8, 16, 32, 64, 128 cycles get 1/16, 1/16, 1/8,
    1/4, 1/2 of the phase's level; equal spending (the default) 1/5 each; a cap that is
    not a doubling (8 ... 100) still sums to 1; a look outside 1..looks is an error."""
    info = ConfirmConfig(look_spending="information")
    run = ConfirmationRun(("a", "b"), 8, 128, info)
    assert [run.look_share(j) for j in range(1, 6)] == pytest.approx(
        [1 / 16, 1 / 16, 1 / 8, 1 / 4, 1 / 2]
    )
    flat = ConfirmationRun(("a", "b"), 8, 128, ConfirmConfig())
    assert [flat.look_share(j) for j in range(1, 6)] == pytest.approx([0.2] * 5)
    odd = ConfirmationRun(("a", "b"), 8, 100, info)
    assert sum(odd.look_share(j) for j in range(1, odd.looks + 1)) == pytest.approx(1.0)
    assert odd.look_share(odd.looks) == pytest.approx((100 - 64) / 100)
    const = ConfirmationRun(("a", "b"), 8, 64, ConfirmConfig(look_schedule="constant",
                                                             look_spending="information"))  # fmt: skip
    assert [const.look_share(j) for j in range(1, 9)] == pytest.approx([1 / 8] * 8)
    with pytest.raises(ValueError, match="outside"):
        run.look_share(6)
    with pytest.raises(ValueError, match="look_spending"):
        ConfirmConfig(look_spending="pocock")


def test_the_level_of_each_look_is_the_share_of_that_look() -> None:
    """Information spending: a pair with no slowdown, judged at every look (no futility
    stop), records alpha * share(j) at look j (the last look, 128 cycles, half the
    level)."""
    rng = np.random.default_rng(3)
    cfg = ConfirmConfig(futility_stop=False, look_spending="information")
    run = ConfirmationRun(("a", "b"), 8, 128, cfg)
    levels = []
    while not run.done:
        obs = [ConfirmationObservation(f"r{len(run.observations)}-{r}", frozenset(m),
                                       {k: rng.normal(0, 0.3) for k in sorted(m)})
               for r, m in enumerate(run.next_block())]  # fmt: skip
        run.add(obs)
        assert run.group_result is not None
        levels.append(run.group_result.p_threshold)
    assert levels == pytest.approx([run.alpha * s for s in (1 / 16, 1 / 16, 1 / 8, 1 / 4, 1 / 2)])
