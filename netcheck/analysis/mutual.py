"""Detector A's mutual pair test (pure): both directions of a pair, combined.

Two identities on one backend slow *each other*: node i's residual rises when j is
loaded and j's when i is. Detector A's selection steps test each direction on its own
(an edge needs both to clear a Bonferroni level over ``n (n - 1)`` ordered pairs, or a
reverse test), so a pair whose per-direction evidence falls short in both rows (noisy
timing, jittered answers, a short window) is never nominated, although together the two
rows hold about ``sqrt(2)`` times the evidence of one. This test adds them:

- per ordered pair ``(i, j)``: the first-step test of :func:`~netcheck.analysis.detector_a.forward_selection`,
  i.e. the two-sample t of node i's residuals in the rounds j was loaded vs not, with
  the pooled within-arm variance moderated toward the population median (Smyth 2004,
  ``DetectorConfig.prior_df``), ``df = n1 + n0 - 2 + prior_df``;
- per unordered pair: Stouffer's combination of the two one-sided p-values,
  ``Z = (z_ij + z_ji) / sqrt(2)`` with ``z = Phi^-1(1 - p)`` (Stouffer et al., *The
  American Soldier* vol. 1, 1949; Whitlock, *J. Evol. Biol.* 18 (2005) 1368-1373).
  Under the null (neither node's load affects the other) the two p-values are
  independent: they read different nodes' noise against independent random load bits.
  Where only one direction is testable (``DetectorConfig.mutual_one_way``, session 9),
  ``Z`` is that direction's ``z``, standard normal under the null all the same.

An edge needs ``P(Z' > Z) < alpha / (n (n - 1) / 2)`` (Bonferroni over unordered pairs,
the detector's own ``alpha`` like Detector B's) or, when that is looser, ``P`` within the
Benjamini-Hochberg threshold at ``DetectorConfig.mutual_fdr`` (session 5; pairs that
miss the effect floors enter its family with ``p = 1``: :func:`mutual_level`), the mean of the two effects above
``effect_floor`` and each above ``effect_floor / 2`` (both members slow down: one real
partner cannot carry an innocent node); with one testable direction, its effect above
``effect_floor``. Like every screening edge it only nominates a
suspect group; the flag needs the confirmation rounds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.stats import false_discovery_control, norm

from netcheck.analysis.detector_a import arm_moments, moderate, prior_variance
from netcheck.analysis.detector_config import DetectorConfig
from netcheck.analysis.tails import normal_sf, t_sf

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class MutualTest:
    """Both directions of every pair. ``(n, n)`` arrays, entry ``[i, j]`` = node i's
    row against j's load bit: ``effect`` (log-slowdown), moderated ``t``, ``df``, and
    ``n_rounds`` (i's observed rounds); ``z``: the symmetric Stouffer combination
    (``z[i, j] == z[j, i]``) and ``p`` its one-sided normal tail. NaN: untestable
    (an arm with fewer than ``min_rounds`` rounds) and the diagonal."""

    effect: FloatArray
    t: FloatArray
    df: FloatArray
    n_rounds: FloatArray
    z: FloatArray
    p: FloatArray


def moderated_pairwise(
    e: FloatArray, loaded: BoolArray, cfg: DetectorConfig
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """First-step test of every ordered pair at once: ``(effect, t, df, n_rounds)``,
    each ``(n, n)`` (``e``: residuals ``(n, R)``, NaN = not observed; ``loaded``:
    ``(n, R)`` bool); :func:`~netcheck.analysis.detector_a.arm_moments`."""
    n1, n0, mean1, mean0, ss1, ss0 = arm_moments(e, loaded)
    s0_sq = prior_variance(e) if cfg.prior_df > 0 else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        dof = n1 + n0 - 2.0
        s2 = moderate((ss1 + ss0) / dof, dof, s0_sq, cfg.prior_df)
        effect = mean1 - mean0
        t = effect / np.sqrt(s2 * (1.0 / n1 + 1.0 / n0))
    df = dof + cfg.prior_df
    bad = (n1 < cfg.mutual_min_rounds) | (n0 < cfg.mutual_min_rounds) | ~np.isfinite(t)
    np.fill_diagonal(bad, True)
    for arr in (effect, t, df):
        arr[bad] = np.nan
    return effect, t, df, n1 + n0


def mutual_test(e: FloatArray, loaded: BoolArray, cfg: DetectorConfig) -> MutualTest:
    """The mutual pair test of every pair (module docstring)."""
    effect, t, df, n_rounds = moderated_pairwise(e, loaded, cfg)
    p_one = t_sf(t, df)
    with np.errstate(invalid="ignore"):
        z_one = norm.isf(np.clip(p_one, 1e-300, 1.0))
    fwd, back = np.isfinite(p_one), np.isfinite(p_one.T)
    z = np.where(fwd & back, (z_one + z_one.T) / np.sqrt(2.0), np.nan)
    if cfg.mutual_one_way:
        z = np.where(fwd & ~back, z_one, z)
        z = np.where(back & ~fwd, z_one.T, z)
    return MutualTest(effect, t, df, n_rounds, z, normal_sf(z))


def bh_threshold(p: FloatArray, q: float) -> float:
    """Benjamini-Hochberg step-up threshold at false discovery rate ``q``.

    ``p``: the p-values of the family (any shape; NaN entries are not tests). Returns
    ``p_(k)`` for the largest k with ``p_(k) <= q k / m`` (m finite p-values), or 0.0
    when there is none or ``q <= 0`` (Benjamini & Hochberg, *J. R. Stat. Soc. B* 57
    (1995) 289-300; the adjusted p-values of ``scipy.stats.false_discovery_control``).
    """
    flat = p[np.isfinite(p)].ravel()
    if flat.size == 0 or q <= 0:
        return 0.0
    rejected = flat[false_discovery_control(flat, method="bh") <= q]
    return float(rejected.max()) if rejected.size else 0.0


def above_floors(test: MutualTest, cfg: DetectorConfig, floor: float | None = None) -> BoolArray:
    """``(n, n)`` bool, symmetric: the pairs whose effects meet the floors (the mean of
    the two above ``floor``, each above ``floor / 2``; with ``cfg.mutual_one_way`` and
    one testable direction, its effect above ``floor``). ``floor`` in log units, None:
    ``cfg.effect_floor``."""
    f = cfg.effect_floor if floor is None else floor
    eff, eff_t = test.effect, test.effect.T
    with np.errstate(invalid="ignore"):
        both = ((eff + eff_t) / 2.0 > f) & (np.minimum(eff, eff_t) > f / 2.0)
        if not cfg.mutual_one_way:
            return both
        fwd, back = np.isfinite(eff), np.isfinite(eff_t)
        one = (fwd & ~back & (eff > f)) | (back & ~fwd & (eff_t > f))
        return both | one


def mutual_level(test: MutualTest, cfg: DetectorConfig) -> float:
    """The p-value level of the mutual test: the Bonferroni level over unordered pairs,
    or the Benjamini-Hochberg threshold at ``cfg.mutual_fdr`` when larger (module
    docstring; ``DetectorConfig.mutual_fdr``). A pair passes when its p is below the
    returned level (the BH threshold ``p_(k)`` is returned as the next float above it,
    so every BH rejection passes).

    The BH family is every testable unordered pair, but a pair whose effects miss the
    floors (:func:`above_floors`) enters with ``p = 1`` (``mutual_fdr_family =
    "nominable"``): it can never be nominated, so it must not loosen the threshold for
    the others. Otherwise identities of one operator that slow each other *below* the
    floor (never nominated, no risk to them) buy a looser level for every honest pair:
    measured, 100 such pairs at p ~ 0 moved the level from z 3.93 to 2.96 at 32 rounds
    (sigma_w 0.15, 200 identities) and nominated 12.6 honest unrelated pairs per
    analysis instead of 0.8. A p raised to 1 is still a valid p-value, and BH is
    monotone: the level is never looser than with every pair's own p (``"all"``).
    """
    n = test.z.shape[0]
    bonferroni = cfg.p_crit_mutual(n)
    if cfg.mutual_fdr <= 0 or n < 2:
        return bonferroni
    p = test.p if cfg.mutual_fdr_family == "all" else np.where(above_floors(test, cfg), test.p, 1.0)
    p = np.where(np.isfinite(test.p), p, np.nan)
    bh = bh_threshold(p[np.triu_indices(n, 1)], cfg.mutual_fdr)
    return max(bonferroni, float(np.nextafter(bh, np.inf)) if bh > 0 else 0.0)


def mutual_hits(test: MutualTest, cfg: DetectorConfig) -> BoolArray:
    """Upper-triangle ``(n, n)`` bool: the pairs that pass (module docstring): p below
    :func:`mutual_level` and the effects above the nomination floor
    (``cfg.mutual_nominate_floor``, else ``cfg.effect_floor``)."""
    level = mutual_level(test, cfg)
    with np.errstate(invalid="ignore"):
        hit = (test.p < level) & above_floors(test, cfg, cfg.mutual_nominate_floor)
    return np.triu(hit, 1)
