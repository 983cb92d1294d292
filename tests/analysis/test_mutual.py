"""Detector A's mutual pair test (netcheck/analysis/mutual.py)."""

from __future__ import annotations

import math

import numpy as np

from netcheck.analysis.detectors import DetectorConfig, detect
from netcheck.analysis.mutual import moderated_pairwise, mutual_hits, mutual_test
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
