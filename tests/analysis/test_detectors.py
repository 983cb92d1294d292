"""Tests for netcheck.analysis.detectors: Detector A, B, t tail and components."""

from __future__ import annotations

import math

import numpy as np

from netcheck.analysis.detector_a import (
    Selection,
    forward_selection,
    pairwise_welch,
    reverse_tests,
)
from netcheck.analysis.detectors import DetectorConfig, connected_components, detect
from netcheck.analysis.tails import t_isf, t_sf
from netcheck.analysis.timing import median_polish


def _population(n: int, rounds: int, groups: list[list[int]], seed: int) -> tuple:
    """Residuals and load bits of n nodes, with the given groups sharing a backend."""
    rng = np.random.default_rng(seed)
    loaded = rng.random((n, rounds)) < 0.5
    y = rng.normal(0, 0.05, (n, rounds)) + rng.normal(0, 0.1, (n, 1))
    for g in groups:
        k_loaded = loaded[g].sum(axis=0)
        y[g] += np.log(1 + 0.5 * np.maximum(k_loaded - 1, 0))
    y[~loaded] = np.nan
    keys = tuple(f"n{i}" for i in range(n))
    return median_polish(y).residuals, loaded, keys


def test_t_sf_known_values() -> None:
    """Student t tail matches known values (df=1 is Cauchy; large df is normal)."""
    assert math.isclose(float(t_sf(1.0, 1.0)), 0.25, rel_tol=1e-10)
    assert math.isclose(float(t_sf(0.0, 7.0)), 0.5, rel_tol=1e-12)
    assert math.isclose(float(t_sf(2.0, 1e6)), 0.5 * math.erfc(2 / math.sqrt(2)), rel_tol=1e-4)


#: Values of the former hand port (Numerical Recipes incomplete beta, before scipy),
#: printed by it at commit 43a5a57: the scipy tails must give the same numbers.
FORMER_T_SF = [
    (2.0, 10, 0.03669401738537012), (5.0, 10, 0.0002686668013782266),
    (1.5, 3.3, 0.11125159835964593), (8.0, 4, 0.0006619484546085838),
    (-1.0, 7, 0.8246916685898964),
]  # fmt: skip
FORMER_T_ISF = [(0.05, 10, 1.8124611228704453), (1e-6, 4, 41.57785415649414),
                (1e-3, 30, 3.3851848673075438)]  # fmt: skip


def test_t_tails_match_the_former_port() -> None:
    """scipy's Student-t tails give the numbers the hand port gave (float tolerance), and
    NaN for a non-finite t or df <= 0 as before."""
    for t, df, p in FORMER_T_SF:
        assert math.isclose(float(t_sf(t, df)), p, rel_tol=1e-9)
    for p, df, t in FORMER_T_ISF:
        assert math.isclose(t_isf(p, df), t, rel_tol=1e-8)
    assert all(math.isnan(float(t_sf(t, df))) for t, df in
               [(math.nan, 3), (math.inf, 3), (1.0, 0), (1.0, -1), (1.0, math.nan)])  # fmt: skip


def test_t_isf_inverts_t_sf() -> None:
    """The t quantile from bisection gives back the tail probability."""
    for p, df in ((1e-3, 5.0), (2.5e-7, 25.0)):
        assert math.isclose(float(t_sf(t_isf(p, df), df)), p, rel_tol=1e-6)


def test_z_crit_is_about_five_for_200_nodes() -> None:
    """The Bonferroni bound for n = 200 and alpha = 0.01 is about 5.0."""
    assert 4.9 < DetectorConfig(alpha=0.01).z_crit(200) < 5.1


def test_detector_a_finds_planted_pair() -> None:
    """A shared pair among 40 nodes is the only suspect group after 48 rounds."""
    e, loaded, keys = _population(40, 48, [[3, 17]], seed=5)
    det = detect(e, loaded, keys, DetectorConfig(use_correlation=False))
    assert [g.members for g in det.groups] == [("n3", "n17")]
    edge = det.edges[0]
    assert edge.p_value < edge.p_threshold and edge.effect > edge.effect_floor


def test_detectors_flag_nothing_in_honest_population() -> None:
    """An all-honest population of 60 nodes over 64 rounds yields no edges."""
    e, loaded, keys = _population(60, 64, [], seed=6)
    assert detect(e, loaded, keys, DetectorConfig()).edges == ()


def test_detector_b_and_selection_join_a_group_of_five() -> None:
    """A farm of 5 is one suspect group after 96 rounds."""
    e, loaded, keys = _population(40, 96, [[1, 8, 9, 20, 33]], seed=7)
    det = detect(e, loaded, keys, DetectorConfig())
    assert [g.members for g in det.groups] == [("n1", "n8", "n9", "n20", "n33")]


def test_pairwise_welch_matrix_matches_scalar() -> None:
    """The vectorised Welch t equals a direct computation for one pair."""
    e, loaded, _ = _population(10, 40, [[0, 1]], seed=8)
    pw = pairwise_welch(e, loaded)
    obs = np.isfinite(e[0])
    a, b = e[0, obs & loaded[1]], e[0, obs & ~loaded[1]]
    t = (a.mean() - b.mean()) / math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    assert math.isclose(pw.t[0, 1], t, rel_tol=1e-9)


def test_connected_components() -> None:
    """Union-find groups edges into components of 2+ nodes."""
    assert connected_components(6, [(0, 4), (4, 5), (2, 3)]) == [[0, 4, 5], [2, 3]]


def test_alpha_budget_of_detector_a_sums_to_alpha() -> None:
    """Single steps, group steps (each size) and reverse tests share alpha exactly."""
    cfg = DetectorConfig()
    n = 200
    single = cfg.p_crit_single(n) * n * (n - 1)
    groups = sum(cfg.p_crit_group(n, s) * n * math.comb(n - 1, s) for s in range(2, 5))
    reverse = cfg.p_crit_reverse(37) * 37
    assert math.isclose(single + groups + reverse, cfg.alpha, rel_tol=1e-9)
    plain = DetectorConfig(group_step=1, reverse_test=False)
    assert math.isclose(plain.p_crit_single(n), plain.p_crit(n))


def test_group_step_finds_a_triple_in_few_rounds() -> None:
    """A farm of 3 among 60 nodes after 32 rounds: a group step selects both partners,
    where single steps alone miss it."""
    e, loaded, keys = _population(60, 32, [[4, 21, 50]], seed=9)
    sel = forward_selection(e, loaded, DetectorConfig())
    groups = {(s.i, s.j) for s in sel if s.step == "group"}
    assert {(4, 21), (4, 50)} <= groups or {(21, 4), (21, 50)} <= groups
    det = detect(e, loaded, keys, DetectorConfig())
    assert [set(g.members) for g in det.groups] == [{"n4", "n21", "n50"}]
    single = detect(e, loaded, keys, DetectorConfig(group_step=1, reverse_test=False,
                                                    use_correlation=False, mutual_test=False))  # fmt: skip
    assert single.groups == ()


def test_reverse_test_only_for_one_way_selections() -> None:
    """A one-way selection is tested in the other row at alpha / 2 / m; an honest row's
    reverse test fails."""
    e, loaded, keys = _population(40, 48, [[3, 17]], seed=5)
    cfg = DetectorConfig()
    real = Selection(3, 17, 10.0, 30.0, 1e-12, 0.4, 24, cfg.p_crit_single(40))
    fake = Selection(3, 9, 10.0, 30.0, 1e-12, 0.4, 24, cfg.p_crit_single(40))
    got = reverse_tests(e, loaded, [real, fake], cfg)
    assert [rv.passed for rv in got] == [True, False]
    assert got[0].p_threshold == cfg.alpha / 2 / 2 and got[0].count_of == (3,)


def test_honest_population_no_edges_with_short_screening() -> None:
    """No edges among 80 honest nodes after 16 or 32 rounds (group steps included)."""
    for rounds, seed in ((16, 21), (32, 22)):
        e, loaded, keys = _population(80, rounds, [], seed=seed)
        assert detect(e, loaded, keys, DetectorConfig()).edges == ()
