"""Tests for netcheck.analysis.detectors: Detector A, B, t tail and components."""

from __future__ import annotations

import math

import numpy as np

from netcheck.analysis.detectors import (
    DetectorConfig,
    connected_components,
    detect,
    pairwise_welch,
    t_sf,
)
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


def test_z_crit_is_about_five_for_200_nodes() -> None:
    """The Bonferroni bound for n = 200 and alpha = 0.01 is about 5.0."""
    assert 4.9 < DetectorConfig().z_crit(200) < 5.1


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
