"""The mutual test's Benjamini-Hochberg family (``DetectorConfig.mutual_fdr_family``,
netcheck/analysis/mutual.py ``mutual_level``): pairs that can never be nominated (effects
below the floors) must not loosen the level for the others."""

from __future__ import annotations

import numpy as np

from netcheck.analysis.detector_config import DetectorConfig
from netcheck.analysis.mutual import MutualTest, mutual_hits, mutual_level, mutual_test
from netcheck.analysis.timing import median_polish

N, R = 60, 24


def _table(pairs: dict[tuple[int, int], tuple[float, float]]) -> MutualTest:
    """A mutual test of N nodes: ``(i, j) -> (p, effect both ways)``; other pairs p 0.5,
    effect 0."""
    p = np.full((N, N), 0.5)
    effect = np.zeros((N, N))
    for (i, j), (pv, eff) in pairs.items():
        p[i, j] = p[j, i] = pv
        effect[i, j] = effect[j, i] = eff
    np.fill_diagonal(p, np.nan)
    np.fill_diagonal(effect, np.nan)
    z = np.zeros((N, N))
    return MutualTest(effect, z, z + 30.0, z + R, z, p)


def test_pairs_below_the_floor_do_not_loosen_the_level() -> None:
    """29 pairs slowed below the floor (p 1e-12, effect 0.15 < log 1.25: never
    nominated) and one pair above it at p 5e-4: with every pair's own p in the BH family
    the 29 buy a level of 5e-4 (BH: 0.25 x 30 / 1,770 = 4.2e-3 >= 5e-4) and the pair is
    nominated; entering with p = 1 they leave the Bonferroni level (0.5 / 1,770 =
    2.8e-4) and the pair is not."""
    pairs = {(2 * k, 2 * k + 1): (1e-12, 0.15) for k in range(29)}
    pairs[(58, 59)] = (5e-4, 0.3)
    mt = _table(pairs)
    cfg, loose = DetectorConfig(), DetectorConfig(mutual_fdr_family="all")
    assert mutual_level(mt, cfg) == cfg.p_crit_mutual(N)
    assert not mutual_hits(mt, cfg)[58, 59]
    assert mutual_level(mt, loose) > 5e-4
    assert mutual_hits(mt, loose)[58, 59]


def test_an_operator_slowing_its_own_identities_below_the_floor_nominates_no_honest_pair() -> None:
    """Residuals: 40 identities of one operator slow their partner (2k, 2k + 1) by 0.15
    log (below the floor, little noise, so their p is tiny), 20 honest noisy identities
    (sd 0.3, 24 rounds). Over 30 populations the honest pairs nominated at the default
    family are those nominated without the operator's slowing (the attack buys nothing);
    with every pair's own p in the family the operator's pairs loosen the level and
    honest pairs are nominated (measured at FDR 0.25: 5 honest pairs nominated at the
    default family, 5 at Bonferroni, 31 with every pair's own p; at 0.75, the default
    since session 8: 8 at the default family, 8 without the slowing, 109 with every
    pair's own p)."""
    default, loose, bonf = (DetectorConfig(), DetectorConfig(mutual_fdr_family="all"),
                            DetectorConfig(mutual_fdr=0.0))  # fmt: skip
    counts = {"default": 0, "all": 0, "bonf": 0, "clean": 0}
    honest = np.zeros((N, N), dtype=bool)
    honest[40:, 40:] = True
    for seed in range(30):
        rng = np.random.default_rng(seed)
        loaded = rng.random((N, R)) < 0.5
        y = rng.normal(0.0, 0.3, (N, R))
        y[:40] *= 0.1
        for k in range(20):
            y[2 * k] += 0.15 * loaded[2 * k + 1]
            y[2 * k + 1] += 0.15 * loaded[2 * k]
        y[~loaded] = np.nan
        clean = y.copy()  # the same identities without the operator's slowing
        for k in range(20):
            clean[2 * k] -= 0.15 * loaded[2 * k + 1]
            clean[2 * k + 1] -= 0.15 * loaded[2 * k]
        mt_clean = mutual_test(median_polish(clean).residuals, loaded, default)
        counts["clean"] += int((mutual_hits(mt_clean, default) & honest).sum())
        e = median_polish(y).residuals
        mt = mutual_test(e, loaded, default)
        for name, cfg in (("default", default), ("all", loose), ("bonf", bonf)):
            counts[name] += int((mutual_hits(mt, cfg) & honest).sum())
    assert counts["default"] <= counts["clean"] + 1, counts
    assert counts["all"] >= counts["clean"] + 15, counts
