"""Detector A's mutual pair test (netcheck/analysis/mutual.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from netcheck.analysis.detectors import DetectorConfig, detect
from netcheck.analysis.mutual import (
    bh_threshold,
    moderated_pairwise,
    mutual_hits,
    mutual_level,
    mutual_test,
)
from netcheck.analysis.timing import median_polish

N, R = 60, 24


def _rows(
    seed: int, sd: float, pair_effect: float, one_way: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Residuals and load bits: nodes 0 and 1 slow each other by ``pair_effect`` (only
    node 0 is slowed by node 1 when ``one_way``), noise ``sd``, half the nodes loaded."""
    rng = np.random.default_rng(seed)
    loaded = rng.random((N, R)) < 0.5
    y = rng.normal(0, sd, (N, R)) + rng.normal(0, 0.05, (N, 1))
    y[0] += pair_effect * loaded[1]
    if not one_way:
        y[1] += pair_effect * loaded[0]
    y[~loaded] = np.nan
    return median_polish(y).residuals, loaded


def test_first_step_t_matches_the_pooled_two_sample_t() -> None:
    """Without moderation the test of row i vs j's load bit is the pooled two-sample t."""
    e, loaded = _rows(0, 0.1, 0.4)
    effect, t, df, _n = moderated_pairwise(e, loaded, DetectorConfig(prior_df=0))
    obs = np.isfinite(e[0])
    a, b = e[0, obs & loaded[1]], e[0, obs & ~loaded[1]]
    sp = math.sqrt(
        ((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2)
    )
    assert math.isclose(effect[0, 1], a.mean() - b.mean())
    assert math.isclose(t[0, 1], (a.mean() - b.mean()) / (sp * math.sqrt(1 / a.size + 1 / b.size)))
    assert df[0, 1] == a.size + b.size - 2


def test_a_pair_each_row_misses_is_nominated_by_both_rows_together() -> None:
    """Jitter-level noise: neither row selects its partner at its Bonferroni level, so
    without the mutual test there is no edge; the combined test finds the pair."""
    e, loaded = _rows(2, 0.2, math.log(1.5))
    without = detect(e, loaded, tuple(f"n{i}" for i in range(N)), DetectorConfig(mutual_test=False))
    assert not any({ed.a, ed.b} == {"n0", "n1"} for ed in without.edges)
    with_test = detect(e, loaded, tuple(f"n{i}" for i in range(N)), DetectorConfig())
    kinds = {ed.detector for ed in with_test.edges if {ed.a, ed.b} == {"n0", "n1"}}
    assert kinds == {"A-mutual"}
    assert any(set(g.members) == {"n0", "n1"} for g in with_test.groups)


def test_one_way_slowdown_is_not_a_mutual_pair() -> None:
    """Only node 0 slows when node 1 is loaded: the combined z may be large, but node 1
    shows no slowdown of its own, so there is no mutual edge."""
    e, loaded = _rows(4, 0.05, 0.8, one_way=True)
    mt = mutual_test(e, loaded, DetectorConfig())
    assert mt.p[0, 1] < DetectorConfig().p_crit_mutual(N)
    assert not mutual_hits(mt, DetectorConfig())[0, 1]


def test_combined_p_values_are_calibrated_on_honest_nodes() -> None:
    """No node affects another: the fraction of pairs with combined p < 0.01 is about
    0.01 (the two rows' p-values are independent under the null), not inflated."""
    rng = np.random.default_rng(7)
    n, r = 100, 32
    loaded = rng.random((n, r)) < 0.5
    y = rng.normal(0, 0.1, (n, r))
    y[~loaded] = np.nan
    mt = mutual_test(median_polish(y).residuals, loaded, DetectorConfig())
    p = mt.p[np.triu_indices(n, 1)]
    assert 0.004 < float(np.mean(p < 0.01)) < 0.02
    assert not mutual_hits(mt, DetectorConfig()).any()


def test_bh_threshold_matches_the_step_up_rule() -> None:
    """Benjamini-Hochberg: the largest p_(k) <= q k / m; NaN entries are not tests."""
    p = np.array([0.01, 0.02, 0.03, 0.5, np.nan])
    assert bh_threshold(p, 0.05) == 0.03  # 0.03 <= 0.05 * 3 / 4
    assert bh_threshold(p, 0.01) == 0.0  # 0.01 > 0.01 * 1 / 4
    assert bh_threshold(np.array([0.001, 0.04]), 0.05) == 0.04
    assert bh_threshold(p, 0.0) == 0.0
    assert bh_threshold(np.array([np.nan]), 0.5) == 0.0


def _farm_rows(seed: int, pairs: int, effect: float, sd: float) -> tuple[np.ndarray, np.ndarray]:
    """Residuals and load bits of N nodes where nodes (2k, 2k + 1), k < ``pairs``, slow
    each other by ``effect``."""
    rng = np.random.default_rng(seed)
    loaded = rng.random((N, R)) < 0.5
    y = rng.normal(0, sd, (N, R))
    for k in range(pairs):
        y[2 * k] += effect * loaded[2 * k + 1]
        y[2 * k + 1] += effect * loaded[2 * k]
    y[~loaded] = np.nan
    return median_polish(y).residuals, loaded


def test_fdr_nominates_pairs_bonferroni_misses_and_no_honest_node_more() -> None:
    """With 10 noisy farm pairs among 60 nodes, BH at q nominates more of them than
    Bonferroni over the 1,770 pairs (each miss is a pair confirmation never gets to
    test), and the level it uses is never stricter than Bonferroni's; over 20
    populations the share of nominated pairs that are not farm pairs stays under q
    (measured at q 0.25: 22 of 93 = 0.24; at the default 0.75: 149 of 274 = 0.54;
    nominees are then tested by confirmation)."""
    bonf = DetectorConfig(mutual_fdr=0.0)
    for fdr in (DetectorConfig(mutual_fdr=0.25), DetectorConfig()):
        found = {"fdr": 0, "bonf": 0}
        honest_nominated = 0
        for seed in range(20):
            e, loaded = _farm_rows(seed, 10, 0.35, 0.25)
            mt = mutual_test(e, loaded, fdr)
            assert mutual_level(mt, fdr) >= mutual_level(mt, bonf) == bonf.p_crit_mutual(N)
            hits_fdr, hits_bonf = mutual_hits(mt, fdr), mutual_hits(mt, bonf)
            assert not (hits_bonf & ~hits_fdr).any()
            farm = np.zeros((N, N), dtype=bool)
            for k in range(10):
                farm[2 * k, 2 * k + 1] = True
            found["fdr"] += int((hits_fdr & farm).sum())
            found["bonf"] += int((hits_bonf & farm).sum())
            honest_nominated += int((hits_fdr & ~farm).sum())
        assert found["fdr"] >= found["bonf"] + 20, found
        share = honest_nominated / (honest_nominated + found["fdr"])
        assert share <= fdr.mutual_fdr + 0.05, (fdr.mutual_fdr, honest_nominated, found)


def test_one_round_in_an_arm_is_testable_by_the_mutual_test() -> None:
    """Nodes 0 and 1 share a card (effect 0.5, noise 0.05) but node 0 was loaded alone in
    a single round: at ``mutual_min_rounds`` 1 (the default) the pair is tested and
    passes the level, at 2 (before session 8) it is untestable. Arms of 1 and 1 have no
    variance of their own and stay untestable; the t's null distribution holds (under
    no effect, P(p < 0.01) over many one-round arms stays about 0.01)."""
    rng = np.random.default_rng(4)
    loaded = rng.random((N, R)) < 0.5
    loaded[0], loaded[1] = True, True
    loaded[1, 5] = False  # the only round with node 0 loaded and node 1 not
    loaded[0, 6] = False
    y = rng.normal(0, 0.05, (N, R))
    y[0] += 0.5 * loaded[1]
    y[1] += 0.5 * loaded[0]
    y[~loaded] = np.nan
    e = median_polish(y).residuals
    for cfg, testable in ((DetectorConfig(), True), (DetectorConfig(mutual_min_rounds=2), False)):
        mt = mutual_test(e, loaded, cfg)
        assert bool(np.isfinite(mt.z[0, 1])) is testable
        assert bool(mutual_hits(mt, cfg)[0, 1]) is testable
    lone = np.zeros((2, 4), dtype=bool)
    lone[0, :2] = lone[1, [0, 2]] = True  # row 0: one round each with and without row 1
    ones = np.where(lone, 0.0, np.nan)
    assert np.isnan(moderated_pairwise(ones, lone, DetectorConfig())[1][0, 1])
    # null: node rows independent of the partner's bit, one round in the unloaded arm
    small = 0
    for seed in range(400):
        rng = np.random.default_rng(100 + seed)
        bits = rng.random((N, R)) < 0.5
        bits[0] = True
        bits[1] = True
        bits[1, rng.integers(R)] = False
        resid = np.where(bits, rng.normal(0, 0.1, (N, R)), np.nan)
        _, t, df, _ = moderated_pairwise(median_polish(resid).residuals, bits, DetectorConfig())
        small += int(stats.t.sf(t[0, 1], df[0, 1]) < 0.01)
    assert small <= 12, small  # 400 x 0.01 = 4 expected; binomial 99.9% bound about 12


def _one_direction_rows(
    seed: int, effect: float, sd: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """Nodes 0 and 1 share a card (``effect`` each way); node 1 is never loaded without
    node 0, so only the direction "node 0 against node 1's bit" is testable."""
    rng = np.random.default_rng(seed)
    loaded = rng.random((N, R)) < 0.5
    loaded[1] &= loaded[0]
    loaded[0, :2] = True
    loaded[1, 0], loaded[1, 1] = True, False  # at least one round in each arm of node 0
    y = rng.normal(0, sd, (N, R))
    y[0] += effect * loaded[1]
    y[1] += effect * loaded[0]
    y[~loaded] = np.nan
    return median_polish(y).residuals, loaded


def test_a_pair_with_one_testable_direction_is_judged_on_it() -> None:
    """``mutual_one_way`` (default): the pair is tested on the one direction it has and
    nominated; without it the pair is untestable (NaN), as in sessions 5-8. A one-way
    effect below ``effect_floor`` is not nominated."""
    e, loaded = _one_direction_rows(3, 0.5)
    on, off = DetectorConfig(), DetectorConfig(mutual_one_way=False)
    mt = mutual_test(e, loaded, on)
    assert np.isnan(mt.t[1, 0]) and np.isfinite(mt.t[0, 1])
    assert (
        mt.z[0, 1]
        == mt.z[1, 0]
        == pytest.approx(stats.norm.isf(stats.t.sf(mt.t[0, 1], mt.df[0, 1])))
    )
    assert mutual_hits(mt, on)[0, 1]
    assert np.isnan(mutual_test(e, loaded, off).z[0, 1])
    assert not mutual_hits(mutual_test(e, loaded, off), off)[0, 1]
    keys = tuple(f"n{i}" for i in range(N))
    assert any(set(g.members) == {"n0", "n1"} for g in detect(e, loaded, keys, on).groups)
    weak, weak_bits = _one_direction_rows(3, 0.15, sd=0.01)  # clear, but below log 1.25
    assert not mutual_hits(mutual_test(weak, weak_bits, on), on)[0, 1]


def test_one_direction_p_values_are_calibrated_on_honest_nodes() -> None:
    """No effect, one testable direction: P(p < 0.01) over 600 draws stays about 0.01."""
    small = 0
    for seed in range(600):
        e, loaded = _one_direction_rows(1000 + seed, 0.0, sd=0.1)
        small += int(mutual_test(e, loaded, DetectorConfig()).p[0, 1] < 0.01)
    assert small <= 16, small  # 6 expected; binomial 99.9% bound about 15


def _triple_rows(seed: int, beta: float, sd: float) -> tuple[np.ndarray, np.ndarray]:
    """Residuals and load bits of N nodes, R rounds at load probability 2/3: nodes 0, 1, 2
    share one backend (service time ``1 + beta (m - 1)`` with ``m`` of them loaded), the
    rest are alone; log-noise ``sd``."""
    rng = np.random.default_rng(seed)
    loaded = rng.random((N, R)) < 2 / 3
    y = rng.normal(0, sd, (N, R))
    m = loaded[:3].sum(axis=0)
    y[:3] += np.log1p(beta * np.maximum(m - 1, 0))
    y[~loaded] = np.nan
    return median_polish(y).residuals, loaded


def test_nomination_floor_below_the_family_floor_lets_a_farm_of_three_through() -> None:
    """In a farm of 3 at beta 0.3 each pair's marginal slowdown is diluted by the third
    member's load (log 1.3 alone, log 1.6 / 1.3 with it: about log 1.25 on average), so
    at the default floor (log 1.25) its pairs often miss the floors however strong
    their z; ``mutual_nominate_floor`` log 1.2 nominates them, and the BH level (its
    family keeps ``effect_floor``) does not move."""
    base, low = DetectorConfig(), DetectorConfig(mutual_nominate_floor=math.log(1.2))
    farm = np.zeros((N, N), dtype=bool)
    farm[0, 1] = farm[0, 2] = farm[1, 2] = True
    hits = {"base": 0, "low": 0}
    for seed in range(20):
        e, loaded = _triple_rows(seed, 0.3, 0.03)
        mt = mutual_test(e, loaded, base)
        assert mutual_level(mt, low) == mutual_level(mt, base)
        hb, hl = mutual_hits(mt, base), mutual_hits(mt, low)
        assert not (hb & ~hl).any()
        hits["base"] += int((hb & farm).sum())
        hits["low"] += int((hl & farm).sum())
    assert hits["low"] >= hits["base"] + 10, hits
    ed = detect(e, loaded, tuple(f"n{i}" for i in range(N)), low).edges
    assert {e.effect_floor for e in ed if e.detector == "A-mutual"} <= {math.log(1.2)}


def test_nomination_floor_above_the_family_floor_is_refused() -> None:
    with pytest.raises(ValueError, match="mutual_nominate_floor"):
        DetectorConfig(mutual_nominate_floor=math.log(1.3))
