"""Detector A (pure): per node, greedy forward selection of the nodes whose load predicts
its slowdown (docs/detection.md §2, "Detector A").

:func:`forward_selection` runs partial t-tests with group steps that add 2..4 partners at
once through the count of them loaded; :func:`reverse_tests` tests, in the other row, an
edge that one row selected; :func:`pairwise_welch` is the plain one-step version (Welch
1947), kept as baseline. Input shapes as in :mod:`netcheck.analysis.detectors`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from netcheck.analysis.detector_config import DetectorConfig
from netcheck.analysis.tails import t_isf, t_sf

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class PairwiseTest:
    """Plain pairwise toggle test, all ordered pairs at once; each array is ``(n, n)``.

    Entry ``[i, j]``: node i's mean residual in the rounds where j was loaded minus
    where it was not (``effect``), Welch's ``t`` and Welch–Satterthwaite ``df``, the
    one-sided ``p``, and the arm sizes ``n1``/``n0``. Diagonal and untestable pairs are
    NaN.
    """

    effect: FloatArray
    t: FloatArray
    df: FloatArray
    p: FloatArray
    n1: FloatArray
    n0: FloatArray


def arm_moments(
    e: FloatArray, loaded: BoolArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per ordered pair ``(i, j)``, node i's residuals split by j's load bit:
    ``(n1, n0, mean1, mean0, ss1, ss0)``, each ``(n, n)`` — rounds, means and sums of
    squared deviations in the rounds j was loaded (1) and not (0). ``e``: ``(n, R)``,
    NaN = not observed; ``loaded``: ``(n, R)`` bool. Six matrix products, no loop over
    pairs; NaN means where an arm is empty."""
    observed = np.isfinite(e)
    m = observed.astype(np.float64)
    e0 = np.where(observed, e, 0.0)
    on = loaded.astype(np.float64).T
    off = 1.0 - on
    n1, n0 = m @ on, m @ off
    s1, s0 = e0 @ on, e0 @ off
    q1, q0 = (e0 * e0) @ on, (e0 * e0) @ off
    with np.errstate(divide="ignore", invalid="ignore"):
        mean1, mean0 = s1 / n1, s0 / n0
        ss1 = np.maximum(q1 - n1 * mean1 * mean1, 0.0)
        ss0 = np.maximum(q0 - n0 * mean0 * mean0, 0.0)
    return n1, n0, mean1, mean0, ss1, ss0


def pairwise_welch(e: FloatArray, loaded: BoolArray, min_rounds: int = 4) -> PairwiseTest:
    """Welch two-sample t of node i's residuals split by node j's load bit, for all i, j.

    Source: B. L. Welch, "The generalization of 'Student's' problem when several
    different population variances are involved", *Biometrika* 34 (1947) 28–35 (t and
    the Welch–Satterthwaite degrees of freedom). Computed with six ``(n, R) @ (R, n)``
    matrix products, no loop over pairs. Pairs with fewer than ``min_rounds`` rounds in
    an arm are NaN.
    """
    n1, n0, mean1, mean0, ss1, ss0 = arm_moments(e, loaded)
    with np.errstate(divide="ignore", invalid="ignore"):
        var1, var0 = ss1 / (n1 - 1.0), ss0 / (n0 - 1.0)
        a1, a0 = var1 / n1, var0 / n0
        se2 = a1 + a0
        effect = mean1 - mean0
        t = effect / np.sqrt(se2)
        df = se2 * se2 / (a1 * a1 / (n1 - 1.0) + a0 * a0 / (n0 - 1.0))
    bad = (n1 < min_rounds) | (n0 < min_rounds) | ~(se2 > 0)
    np.fill_diagonal(bad, True)
    for arr in (effect, t, df):
        arr[bad] = np.nan
    p = t_sf(t, df)
    return PairwiseTest(effect, t, df, p, n1, n0)


@dataclass(frozen=True)
class Selection:
    """One forward-selection step of node ``i``: partner ``j`` with its partial test.

    ``step``: ``"single"`` (``t``/``p``/``effect``: the partial t, p and coefficient of
    ``j``'s load bit) or ``"group"`` (``j`` entered together with ``with_partners``;
    ``t``/``p``/``effect``: the test of the slope on the count of those partners that
    were loaded, and that slope). ``p_threshold``: the level the step cleared.
    """

    i: int
    j: int
    t: float
    df: float
    p: float
    effect: float
    n_rounds: int
    p_threshold: float = math.nan
    step: str = "single"
    with_partners: tuple[int, ...] = ()


def prior_variance(e: FloatArray) -> float:
    """Median over nodes of each node's residual variance (the moderation prior)."""
    counts = np.isfinite(e).sum(axis=1)
    rows = e[counts >= 3]
    if rows.size == 0:
        return 0.0
    return float(np.median(np.nanvar(rows, axis=1, ddof=1)))


def moderate(s2: FloatArray, dof: float | FloatArray, s0_sq: float, prior_df: float) -> FloatArray:
    """Moderated residual variance, only ever raised (Smyth 2004; see DetectorConfig)."""
    if prior_df <= 0:
        return s2
    return np.maximum(s2, (prior_df * s0_sq + dof * s2) / (prior_df + dof))


def _count_t(
    sxx: FloatArray, sxy: FloatArray, yy: float, dof: int, s0_sq: float, prior_df: float
) -> tuple[FloatArray, FloatArray]:
    """Slope and t of the residual on one count regressor (``sxx``, ``sxy``: its sums)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = sxy / sxx
        s2 = moderate(np.maximum(yy - sxy * slope, 0.0) / dof, dof, s0_sq, prior_df)
        t = slope / np.sqrt(s2 / sxx)
    return slope, np.where(np.isfinite(t), t, -np.inf)


def _admissible(
    g: FloatArray, b: FloatArray, yy: float, sets: npt.NDArray[np.int64], dof: int,
    s0_sq: float, cfg: DetectorConfig, guard_t: float,
) -> tuple[BoolArray, FloatArray, FloatArray]:  # fmt: skip
    """Count test and member guards of candidate sets (rows of ``sets``, indices into
    ``g``/``b``). Guard per member j: the model ``count(S - j), c_j`` (two regressors,
    ``dof - 1``): ``c_j``'s partial coefficient above ``effect_floor / 2`` and its t above
    ``guard_t``. Returns (admissible, count t, slope)."""
    gs = g[sets[:, :, None], sets[:, None, :]]  # (K, s, s)
    bs = b[sets]  # (K, s)
    sxx = gs.sum(axis=(1, 2))
    sxy = bs.sum(axis=1)
    slope, t_count = _count_t(sxx, sxy, yy, dof, s0_sq, cfg.prior_df)
    with np.errstate(divide="ignore", invalid="ignore"):
        gjs = gs.sum(axis=2)  # (K, s): sum over the set of G[j, a]
        gjj = np.diagonal(gs, axis1=1, axis2=2)
        guu = sxx[:, None] - 2.0 * gjs + gjj
        guv = gjs - gjj
        bu, bv = sxy[:, None] - bs, bs
        det = guu * gjj - guv * guv
        cu = (gjj * bu - guv * bv) / det
        cv = (guu * bv - guv * bu) / det
        rss2 = np.maximum(yy - cu * bu - cv * bv, 0.0)
        s22 = moderate(rss2 / (dof - 1), dof - 1, s0_sq, cfg.prior_df)
        tv = cv / np.sqrt(s22 * guu / det)
        members_ok = (det > 1e-9 * guu * gjj) & (cv > cfg.effect_floor / 2.0) & (tv > guard_t)
    ok = (slope > cfg.effect_floor) & np.isfinite(t_count) & np.all(members_ok, axis=1)
    return ok, t_count, slope


def _group_search(
    g: FloatArray, b: FloatArray, yy: float, dof: int, s0_sq: float, cfg: DetectorConfig,
    guard_t: float, max_size: int,
) -> dict[int, tuple[tuple[int, ...], float, float]]:  # fmt: skip
    """Best admissible set per size 2..``max_size`` (indices into ``g``), with its count
    t and slope.

    Pairs: every pair (an m x m matrix computation). Larger sets: beam search, the
    ``group_candidates`` best sets of one size by count t, each extended by every other
    candidate. The Bonferroni count covers every possible set, so a partial search
    costs power, never error control.
    """
    m = g.shape[0]
    found: dict[int, tuple[tuple[int, ...], float, float]] = {}
    if m < 2 or dof < 2:
        return found
    d = np.diag(g).copy()
    slope, t = _count_t(d[:, None] + d[None, :] + 2.0 * g, b[:, None] + b[None, :], yy, dof,
                        s0_sq, cfg.prior_df)  # fmt: skip
    t = np.where(np.triu(np.ones((m, m), dtype=bool), 1) & (slope > 0), t, -np.inf)
    width = cfg.group_candidates
    flat = np.argsort(-t, axis=None, kind="stable")[:width]
    flat = flat[np.isfinite(t.ravel()[flat])]
    beam = np.stack(np.unravel_index(flat, t.shape), axis=1).astype(np.int64)
    size = 2
    while beam.size:
        ok, tc, sl = _admissible(g, b, yy, beam, dof, s0_sq, cfg, guard_t)
        if ok.any():
            k = int(np.argmax(np.where(ok, tc, -np.inf)))
            found[size] = (tuple(int(v) for v in beam[k]), float(tc[k]), float(sl[k]))
        if size >= max_size:
            break
        sxx = g[beam[:, :, None], beam[:, None, :]].sum(axis=(1, 2))
        sxy = b[beam].sum(axis=1)
        gsum = g[beam].sum(axis=1)  # (B, m)
        _sl, te = _count_t(sxx[:, None] + 2.0 * gsum + d[None, :], sxy[:, None] + b[None, :],
                           yy, dof, s0_sq, cfg.prior_df)  # fmt: skip
        member = np.zeros_like(te, dtype=bool)
        np.put_along_axis(member, beam, True, axis=1)
        te = np.where(member | ~(_sl > 0), -np.inf, te)
        order = np.argsort(-te, axis=None, kind="stable")
        seen: set[tuple[int, ...]] = set()
        grown: list[tuple[int, ...]] = []
        for f in order:
            r, j = divmod(int(f), m)
            if not np.isfinite(te[r, j]) or len(grown) >= width:
                break
            key = tuple(sorted((*beam[r].tolist(), j)))
            if key not in seen:
                seen.add(key)
                grown.append(key)
        beam = np.array(grown, dtype=np.int64).reshape(len(grown), size + 1)
        size += 1
    return found


def forward_selection(e: FloatArray, loaded: BoolArray, cfg: DetectorConfig) -> list[Selection]:
    """Detector A: for each node, greedily select the partners whose load slows it.

    For node i, on the rounds where i was observed, regress its residual on an intercept
    plus the load bits of the partners selected so far; for every other node j compute
    the partial t of adding j's load bit (the t of the OLS coefficient — at the first
    step this is the pooled two-sample t of "j loaded vs not"). Add the j with the
    largest t among those whose coefficient exceeds ``effect_floor``, while its
    one-sided p is below the single-step level. Regressing out the selected partners
    removes their share of the variance, so the remaining members of a larger group
    stand out.

    **Group steps** (``cfg.group_step`` > 1): in a farm of k >= 3 the partners not yet in
    the model add their own slowdowns to the noise, so each one alone is weak while
    all of them together are strong. At each step, sets of 2..``group_step`` partners
    are also tried (every pair, larger sets by beam search, :func:`_group_search`),
    each as ONE regressor: the count of its members that were loaded (same degrees of
    freedom as a single step). A set is admissible when that slope exceeds
    ``effect_floor``, its one-sided p is below the level of its size
    (:meth:`DetectorConfig.p_crit_group`), and every member's partial coefficient,
    given the count of the others, exceeds ``effect_floor / 2`` with a partial t above
    the ``group_guard_p`` quantile (so a real partner cannot carry an innocent one).
    Among the admissible options (the best single partner, the best set of each size)
    the one whose t exceeds its own critical value by the largest factor enters.
    At the first step, every other partner that passes the single-step level on its
    own is also returned (``step="marginal"``): a spurious partner that happens to win
    the argmax in a row with few rounds must not hide the real one.

    Error bound: for a node whose service time no other node's load affects (an honest
    node) every test in its row is a true null, and a row starts only with a first step
    that clears its level; summed over the Bonferroni families (single steps and group
    steps, half of the selection budget each), the chance that any such node selects
    anyone is at most the selection budget (``alpha``, or ``alpha / 2`` when the
    reverse test takes the other half). Searching only some sets can only lower it.

    Sources: forward stepwise selection (Efroymson 1960, "Multiple regression analysis",
    in *Mathematical Methods for Digital Computers*; Hastie, Tibshirani & Friedman,
    *Elements of Statistical Learning*, 2nd ed., §3.3.2); Bonferroni bound; with
    ``prior_df > 0`` the variance is moderated toward the population median (Smyth,
    "Linear models and empirical Bayes methods...", *Stat. Appl. Genet. Mol. Biol.*
    3 (2004) art. 3). Returns every accepted step (directed; a group step gives one
    :class:`Selection` per member).
    """
    n = e.shape[0]
    p_single = cfg.p_crit_single(n)
    sizes = range(2, cfg.group_step + 1)
    p_group = {s: cfg.p_crit_group(n, s) for s in sizes}
    s0_sq = prior_variance(e) if cfg.prior_df > 0 else 0.0
    crit: dict[tuple[float, float], float] = {}

    def t_crit(p: float, df: float) -> float:
        if (p, df) not in crit:
            crit[(p, df)] = t_isf(p, df)
        return crit[(p, df)]

    out: list[Selection] = []
    for i in range(n):
        obs = np.isfinite(e[i])
        n_i = int(obs.sum())
        if n_i < 2 * cfg.min_rounds + 1:
            continue
        y = e[i, obs]
        c = loaded[:, obs].T.astype(np.float64)  # (n_i, n)
        n1 = c.sum(axis=0)
        eligible = (n1 >= cfg.min_rounds) & (n_i - n1 >= cfg.min_rounds)
        eligible[i] = False
        x = np.ones((n_i, 1))
        marginal: list[tuple[int, float, float]] = []
        while x.shape[1] - 1 < cfg.max_partners:
            dof = n_i - x.shape[1] - 1
            if dof < 1 or not eligible.any():
                break
            q, _r = np.linalg.qr(x)
            ry = y - q @ (q.T @ y)
            rc = c - q @ (q.T @ c)
            cc = np.einsum("ij,ij->j", rc, rc)
            usable = eligible & (cc > 1e-9)
            if not usable.any():
                break
            cy = rc.T @ ry
            yy = float(ry @ ry)
            with np.errstate(divide="ignore", invalid="ignore"):
                coef = cy / cc
                rss = np.maximum(yy - cy * cy / cc, 0.0)
                s2 = moderate(rss / dof, dof, s0_sq, cfg.prior_df)
                t_all = np.where(usable & np.isfinite(coef), coef / np.sqrt(s2 / cc), -np.inf)
            df_t = dof + cfg.prior_df
            t = np.where(coef > cfg.effect_floor, t_all, -np.inf)
            j = int(np.argmax(t))
            if x.shape[1] == 1:  # first step: every partner that passes on its own
                passing = np.flatnonzero(t > t_crit(p_single, df_t))
                marginal = [(int(a), float(t[a]), float(coef[a])) for a in passing if a != j]
            best: tuple[float, tuple[int, ...], float, float, float] | None = None
            if float(t_sf(t[j], df_t)) < p_single:  # (margin, members, t, effect, level)
                best = (t[j] / t_crit(p_single, df_t), (j,), float(t[j]), float(coef[j]),
                        p_single)  # fmt: skip
            room = cfg.max_partners - (x.shape[1] - 1)
            if dof >= 2 and room >= 2 and cfg.group_step > 1:
                idx = np.flatnonzero(usable)
                if idx.size > cfg.group_pool:  # the strongest single partners only
                    idx = idx[np.argsort(-t_all[idx], kind="stable")[: cfg.group_pool]]
                guard = t_crit(cfg.group_guard_p, dof - 1 + cfg.prior_df)
                found = _group_search(rc[:, idx].T @ rc[:, idx], cy[idx], yy, dof, s0_sq, cfg,
                                      guard, min(cfg.group_step, room))  # fmt: skip
                for size, (members_g, t_g, slope_g) in found.items():
                    margin = t_g / t_crit(p_group[size], df_t)
                    if margin > 1.0 and (best is None or margin > best[0]):
                        best = (margin, tuple(int(idx[v]) for v in members_g), t_g, slope_g,
                                p_group[size])  # fmt: skip
            if best is None:
                break
            _margin, members, t_best, effect, level = best
            p = float(t_sf(t_best, df_t))
            step = "single" if len(members) == 1 else "group"
            for a in members:
                others = tuple(m for m in members if m != a)
                out.append(Selection(i, a, t_best, df_t, p, effect, n_i, level, step, others))
                eligible[a] = False
            x = np.hstack([x, c[:, list(members)]])
        taken = {sel.j for sel in out if sel.i == i}
        for a, t_a, coef_a in marginal:
            if a not in taken:
                p = float(t_sf(t_a, n_i - 2 + cfg.prior_df))
                out.append(Selection(i, a, t_a, n_i - 2 + cfg.prior_df, p, coef_a, n_i,
                                     p_single, "marginal"))  # fmt: skip
    return out


@dataclass(frozen=True)
class ReverseTest:
    """Reverse test of a one-way selection ``i -> j`` (see :func:`reverse_tests`).

    ``count_of``: the nodes whose loaded count is the regressor (i and the partners i
    selected together with j); ``t``/``df``/``p``: one-sided test of the slope
    ``effect`` in j's row; ``p_threshold``: ``alpha / 2 / m``; ``passed``: p below it
    and slope above ``effect_floor``.
    """

    i: int
    j: int
    count_of: tuple[int, ...]
    t: float
    df: float
    p: float
    effect: float
    n_rounds: int
    p_threshold: float
    passed: bool


def reverse_tests(
    e: FloatArray, loaded: BoolArray, one_way: list[Selection], cfg: DetectorConfig
) -> list[ReverseTest]:
    """Second-stage test of one-way selections (Detector A; ``cfg.reverse_test``).

    Node i's row selected j at its Bonferroni level but j's row did not select i (often
    because j was loaded in few rounds, or its other partners' load hides i's). Test j's
    row for the hypothesis the selection suggests: j's residual, over the rounds j was
    observed, regressed on an intercept and the count of loaded nodes among ``{i} |
    with_partners - {j}`` (moderated variance, ``n_j - 2 + prior_df`` df); one-sided p
    below ``alpha / 2 / m`` (``m`` = one-way selections tested) and slope above
    ``effect_floor``.

    Why the bound holds: which selections are tested depends on the other nodes' rows;
    given the schedule bits, an honest j's residual noise is independent of them, so
    each of j's reverse tests is a valid null test at its level and the chance that
    any honest node passes one is at most ``alpha / 2`` (Bonferroni over the ``m``
    tests; a two-stage design in the manner of screening then confirming on
    independent data).
    """
    level = cfg.p_crit_reverse(len(one_way))
    s0_sq = prior_variance(e) if cfg.prior_df > 0 else 0.0
    out: list[ReverseTest] = []
    for sel in one_way:
        i, j = sel.i, sel.j
        count_of = tuple(sorted({i, *sel.with_partners} - {j}))
        obs = np.isfinite(e[j])
        n_j = int(obs.sum())
        dof = n_j - 2
        nan = math.nan
        if dof < 1:
            out.append(ReverseTest(i, j, count_of, nan, nan, nan, nan, n_j, level, False))
            continue
        y = e[j, obs] - e[j, obs].mean()
        r = loaded[list(count_of)][:, obs].sum(axis=0).astype(np.float64)
        r -= r.mean()
        sxx, sxy = float(r @ r), float(r @ y)
        if sxx <= 1e-9:
            out.append(ReverseTest(i, j, count_of, nan, nan, nan, nan, n_j, level, False))
            continue
        slope = sxy / sxx
        s2 = float(moderate(np.asarray(max(float(y @ y) - slope * sxy, 0.0) / dof), dof,
                             s0_sq, cfg.prior_df))  # fmt: skip
        t = slope / math.sqrt(s2 / sxx) if s2 > 0 else (math.inf if slope > 0 else -math.inf)
        df = dof + cfg.prior_df
        p = float(t_sf(t, df)) if math.isfinite(t) else (0.0 if t > 0 else 1.0)
        passed = p < level and slope > cfg.effect_floor
        out.append(ReverseTest(i, j, count_of, t, df, p, slope, n_j, level, passed))
    return out
