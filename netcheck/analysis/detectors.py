"""Contention detectors (pure): which nodes slow each other down across screening rounds.

detection.md §2. Input: median-polish residuals ``e`` (shape ``(n, R)``, NaN where the
node was not loaded) and the schedule bits ``loaded`` (``(n, R)`` bool). Output: edges
with their statistic, threshold and effect (the evidence), and suspect groups = the
connected components of the union of the edge sets.

- Detector A (:func:`forward_selection`): per node, greedy forward selection of the
  nodes whose load predicts its slowdown, partial t-tests, with group steps that add
  2..4 partners at once through the count of them loaded; an edge needs both nodes'
  rows to select each other, or one row's selection plus a reverse test in the other
  row (:func:`reverse_tests`). :func:`pairwise_welch` is the plain one-step version
  (Welch 1947), kept as baseline.
- Detector B (:func:`residual_correlation`): correlation of two nodes' residuals over
  the rounds where both were loaded, Fisher z; catches groups of 3+ where the other
  members' load makes both residuals move together.

Multiple testing: every test is one-sided (contention only slows). Detector B and the
baseline test at ``alpha / (n (n - 1))`` (Bonferroni over ordered pairs), i.e.
``z_crit = Phi^-1(1 - alpha / (n (n - 1)))``, about 5.0 for n = 200 and alpha = 0.01.
Detector A splits its ``alpha`` over its test families (single steps, group steps of
each size, reverse tests; :class:`DetectorConfig`), each Bonferroni-bounded, so the
chance that any honest node (one whose service time no other node's load affects)
gets an A edge stays at most ``alpha``.
t statistics are compared through their exact Student-t tail, not against ``z_crit``
directly: with the handful of rounds per node of a short screening, a t with 10
degrees of freedom exceeds 5 about 100 times more often than a normal deviate does.
Significance alone is not enough (honest co-hosted GPUs couple by a few percent), so
every edge must also clear an effect-size floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class DetectorConfig:
    """Thresholds of the screening detectors, with their documented defaults.

    - ``alpha`` (0.5): family-wise error rate of each detector over all ordered pairs
      (Bonferroni): the chance that one analysis nominates any honest node as a suspect.
      Screening only nominates; no flag is raised without the confirmation rounds,
      whose own level bounds false flags (:mod:`netcheck.analysis.confirm_run`), so
      this level prices confirmation rounds, not false flags. At 0.01 (the earlier
      default) a 16-round screening of 200 nodes found half as many pairs.
    - ``effect_floor`` (log 1.25): minimum slowdown, in log units, that one partner's
      load must add to a node's service time (Detector A) — a 25% slowdown. Honest
      co-hosted GPUs couple by a few percent; a shared GPU with batching efficiency beta
      adds ``log(1 + beta)`` (0.41 at beta = 0.5) for a pair.
    - ``min_rounds`` (2): minimum rounds in each arm of a test (partner loaded / not),
      and for Detector B minimum co-loaded rounds is ``min_coloaded_rounds`` (8).
    - ``r_floor`` (0.5): minimum residual correlation for a Detector B edge.
    - ``max_partners`` (8): forward selection stops after this many partners per node.
    - ``forward_selection`` (True): Detector A with greedy forward selection; False =
      the plain pairwise Welch test (the baseline).
    - ``use_correlation`` (True): run Detector B.
    - ``prior_df`` (10): degrees of freedom of the empirical-Bayes prior on each node's
      residual variance (moderated t, Smyth 2004): the prior variance is the median
      node variance; 0 = ordinary t. Short screenings give each node few rounds, and
      a variance from 6 residuals makes the Bonferroni-level t threshold ~22.
    - ``group_step`` (4): forward selection may also add 2 to ``group_step`` partners
      at once (a *group step*, :func:`forward_selection`), tested as the slope on the
      count of them that were loaded; 1 = single partners only. Detector A's ``alpha``
      is then split: half for the single steps (Bonferroni over ordered pairs), half
      shared equally by the group sizes 2..``group_step`` (Bonferroni over node x
      partner set, ``n C(n-1, s)`` tests for size ``s``).
    - ``group_candidates`` (24): beam width of the group search: every pair is tried,
      then this many best sets of each size are extended by one partner (the
      Bonferroni count covers every possible set, so a partial search costs power,
      never error control).
    - ``group_pool`` (48): group steps draw their members from the partners with the
      largest single-partner t at that step (a shared partner's own t is raised by its
      share of the slowdown); the search cost no longer grows with ``n^2`` per node.
      Power only: the Bonferroni count still covers every possible set.
    - ``group_guard_p`` (0.01): in a group step each partner must also slow the node on
      its own: partial coefficient (given the count of the others) above
      ``effect_floor / 2`` and one-sided partial t at this level (not multiplicity
      adjusted: it attributes the slowdown; the count test carries the error bound).
    - ``reverse_test`` (True): a one-way selection ``i -> j`` (i's row selected j, j's
      row did not select i) becomes an edge when j's residual rises with the count of
      loaded nodes among i and the partners i selected together with j, at level
      ``alpha / 2 / m`` (Bonferroni over the ``m`` one-way selections tested; see
      :func:`reverse_tests`). The selection steps then share the other ``alpha / 2``.
    - ``grouping`` (``"cliques"``): suspect groups are the maximal cliques of the edge
      graph, so a group never holds two nodes without an edge between them (a chain
      a-b, b-c gives the groups {a, b} and {b, c}); ``"components"`` = the previous
      connected components, under which a few stray edges merge unrelated farms.
    - ``drop_full_rounds`` (True): rounds in which every node was loaded are left out
      (they are no random design: every farm is slowed at once, so residuals of
      unrelated identities move together and link them).
    """

    alpha: float = 0.5
    effect_floor: float = math.log(1.25)
    min_rounds: int = 2
    min_coloaded_rounds: int = 8
    r_floor: float = 0.5
    max_partners: int = 8
    forward_selection: bool = True
    use_correlation: bool = True
    prior_df: float = 10.0
    group_step: int = 4
    group_candidates: int = 24
    group_pool: int = 48
    group_guard_p: float = 0.01
    reverse_test: bool = True
    grouping: str = "cliques"
    drop_full_rounds: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError("alpha must be in (0, 1)")
        if self.effect_floor < 0 or not 0.0 <= self.r_floor < 1.0:
            raise ValueError("effect_floor must be >= 0 and r_floor in [0, 1)")
        if self.min_rounds < 2 or self.min_coloaded_rounds < 4 or self.max_partners < 1:
            raise ValueError("need min_rounds >= 2, min_coloaded_rounds >= 4, max_partners >= 1")
        if self.prior_df < 0:
            raise ValueError("prior_df must be >= 0")
        if self.group_step < 1 or self.group_candidates < 2 or self.group_pool < 2:
            raise ValueError("need group_step >= 1, group_candidates >= 2, group_pool >= 2")
        if not 0.0 < self.group_guard_p < 1.0:
            raise ValueError("group_guard_p must be in (0, 1)")
        if self.grouping not in ("cliques", "components"):
            raise ValueError("grouping must be 'cliques' or 'components'")

    def p_crit(self, n_nodes: int) -> float:
        """Per-test one-sided level ``alpha / (n (n - 1))`` (Bonferroni)."""
        return self.alpha / max(n_nodes * (n_nodes - 1), 1)

    def _alpha_selection(self) -> float:
        return self.alpha / (2.0 if self.reverse_test else 1.0)

    def p_crit_single(self, n_nodes: int) -> float:
        """Level of a single forward-selection step: Detector A's selection budget
        (``alpha``, or ``alpha / 2`` with the reverse test), halved again when group
        steps share it, over ``n (n - 1)`` ordered pairs."""
        share = self._alpha_selection() / (2.0 if self.group_step > 1 else 1.0)
        return share / max(n_nodes * (n_nodes - 1), 1)

    def p_crit_group(self, n_nodes: int, size: int) -> float:
        """Level of a group step adding ``size`` (2..``group_step``) partners: half the
        selection budget, split equally over the sizes, over ``n C(n-1, size)`` tests."""
        tests = n_nodes * math.comb(max(n_nodes - 1, 0), size)
        return self._alpha_selection() / 2.0 / max(self.group_step - 1, 1) / max(tests, 1)

    def p_crit_reverse(self, n_tests: int) -> float:
        """Level of each of ``n_tests`` reverse tests: ``alpha / 2 / n_tests``."""
        return self.alpha / 2.0 / max(n_tests, 1)

    def z_crit(self, n_nodes: int) -> float:
        """``Phi^-1(1 - alpha / (n (n - 1)))``: the Bonferroni bound as a normal deviate."""
        return float(stats.norm.isf(self.p_crit(n_nodes)))


@dataclass(frozen=True)
class Edge:
    """One detector's evidence that ``a`` and ``b`` share a backend.

    ``detector``: ``"A"`` (forward selection), ``"A-welch"`` (plain pairwise Welch) or
    ``"B"`` (residual correlation). ``statistic``: the smaller of the two directions'
    t (A) or the Fisher z (B); ``df``: its degrees of freedom (``inf`` for z).
    ``p_value``: its one-sided p-value; ``p_threshold``: the Bonferroni level.
    ``effect``: the smaller log-slowdown (A) or the correlation r (B);
    ``effect_floor``: the floor it cleared. ``n_rounds``: rounds used (the smaller
    direction for A, co-loaded rounds for B).
    """

    a: str
    b: str
    detector: str
    statistic: float
    df: float
    p_value: float
    p_threshold: float
    effect: float
    effect_floor: float
    n_rounds: int


@dataclass(frozen=True)
class SuspectGroup:
    """A connected component of the union edge graph (2+ members), with its edges."""

    members: tuple[str, ...]
    edges: tuple[Edge, ...]


@dataclass(frozen=True)
class Detection:
    """All edges kept by the detectors and the suspect groups they form."""

    edges: tuple[Edge, ...]
    groups: tuple[SuspectGroup, ...]
    z_crit: float
    p_crit: float


# --- Student t tail ---------------------------------------------------------------------


def t_sf(t: FloatArray | float, df: FloatArray | float) -> FloatArray:
    """One-sided upper tail ``P(T > t)`` of Student's t with ``df`` (may be fractional).

    ``scipy.stats.t.sf``; NaN where ``t`` or ``df`` is NaN or ``df <= 0``.
    """
    t_arr, df_arr = np.broadcast_arrays(np.asarray(t, float), np.asarray(df, float))
    ok = ~np.isnan(t_arr) & np.isfinite(df_arr) & (df_arr > 0)
    p = stats.t.sf(np.where(ok, t_arr, 0.0), np.where(ok, df_arr, 1.0))
    return np.asarray(np.where(ok, p, np.nan), dtype=np.float64)


def normal_sf(z: FloatArray | float) -> FloatArray:
    """``P(Z > z)`` for a standard normal, elementwise (``scipy.stats.norm.sf``)."""
    return np.asarray(stats.norm.sf(np.asarray(z, float)), dtype=np.float64)


# --- Detector A ---------------------------------------------------------------------------


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


def pairwise_welch(e: FloatArray, loaded: BoolArray, min_rounds: int = 4) -> PairwiseTest:
    """Welch two-sample t of node i's residuals split by node j's load bit, for all i, j.

    Source: B. L. Welch, "The generalization of 'Student's' problem when several
    different population variances are involved", *Biometrika* 34 (1947) 28–35 (t and
    the Welch–Satterthwaite degrees of freedom). Computed with six ``(n, R) @ (R, n)``
    matrix products, no loop over pairs. Pairs with fewer than ``min_rounds`` rounds in
    an arm are NaN.
    """
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
        var1 = np.maximum(q1 - n1 * mean1 * mean1, 0.0) / (n1 - 1.0)
        var0 = np.maximum(q0 - n0 * mean0 * mean0, 0.0) / (n0 - 1.0)
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


def _prior_variance(e: FloatArray) -> float:
    """Median over nodes of each node's residual variance (the moderation prior)."""
    counts = np.isfinite(e).sum(axis=1)
    rows = e[counts >= 3]
    if rows.size == 0:
        return 0.0
    return float(np.median(np.nanvar(rows, axis=1, ddof=1)))


def t_isf(p: float, df: float) -> float:
    """``t`` with ``P(T > t) = p`` for Student's t (``scipy.stats.t.isf``)."""
    return float(stats.t.isf(p, df))


def _moderate(s2: FloatArray, dof: float, s0_sq: float, prior_df: float) -> FloatArray:
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
        s2 = _moderate(np.maximum(yy - sxy * slope, 0.0) / dof, dof, s0_sq, prior_df)
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
        s22 = _moderate(rss2 / (dof - 1), dof - 1, s0_sq, cfg.prior_df)
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
    s0_sq = _prior_variance(e) if cfg.prior_df > 0 else 0.0
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
                s2 = _moderate(rss / dof, dof, s0_sq, cfg.prior_df)
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
    s0_sq = _prior_variance(e) if cfg.prior_df > 0 else 0.0
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
        s2 = float(_moderate(np.asarray(max(float(y @ y) - slope * sxy, 0.0) / dof), dof,
                             s0_sq, cfg.prior_df))  # fmt: skip
        t = slope / math.sqrt(s2 / sxx) if s2 > 0 else (math.inf if slope > 0 else -math.inf)
        df = dof + cfg.prior_df
        p = float(t_sf(t, df)) if math.isfinite(t) else (0.0 if t > 0 else 1.0)
        passed = p < level and slope > cfg.effect_floor
        out.append(ReverseTest(i, j, count_of, t, df, p, slope, n_j, level, passed))
    return out


# --- Detector B ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CorrelationTest:
    """Residual correlation of every pair over co-loaded rounds; ``(n, n)`` arrays.

    ``r``: Pearson correlation, ``z``: Fisher's ``atanh(r) * sqrt(n - 3)``, ``p``: its
    one-sided normal tail, ``n``: co-loaded rounds. Diagonal/untestable entries NaN.
    """

    r: FloatArray
    z: FloatArray
    p: FloatArray
    n: FloatArray


def residual_correlation(e: FloatArray, min_coloaded_rounds: int = 8) -> CorrelationTest:
    """Detector B: correlation of two nodes' residuals over the rounds both were loaded.

    Sources: Pearson correlation; R. A. Fisher, "Frequency distribution of the values
    of the correlation coefficient in samples from an indefinitely large population",
    *Biometrika* 10 (1915) 507–521, and "On the 'probable error' of a coefficient of
    correlation deduced from a small sample", *Metron* 1 (1921) 3–32: ``atanh(r)`` is
    near-normal with variance ``1 / (n - 3)``. Matrix products only.
    """
    observed = np.isfinite(e)
    m = observed.astype(np.float64)
    e0 = np.where(observed, e, 0.0)
    n = m @ m.T
    sx = e0 @ m.T  # sx[i, j] = sum of e_i over rounds both observed
    sxx = (e0 * e0) @ m.T
    sxy = e0 @ e0.T
    with np.errstate(divide="ignore", invalid="ignore"):
        cov = n * sxy - sx * sx.T
        vx = n * sxx - sx * sx
        r = cov / np.sqrt(vx * vx.T)
        r = np.clip(r, -0.999999, 0.999999)
        z = np.arctanh(r) * np.sqrt(n - 3.0)
    bad = (n < min_coloaded_rounds) | ~np.isfinite(r)
    np.fill_diagonal(bad, True)
    r[bad] = np.nan
    z[bad] = np.nan
    return CorrelationTest(r, z, normal_sf(z), n)


# --- groups -------------------------------------------------------------------------------


def connected_components(n: int, pairs: list[tuple[int, int]]) -> list[list[int]]:
    """Components with 2+ members of the graph on ``range(n)`` (union-find, path halving).

    Source: Tarjan, "Efficiency of a good but not linear set union algorithm", *JACM*
    22 (1975). Components are sorted lists, ordered by their smallest member.
    """
    parent = list(range(n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for a in range(n):
        groups.setdefault(find(a), []).append(a)
    return sorted((g for g in groups.values() if len(g) > 1), key=lambda g: g[0])


def maximal_cliques(nodes: list[int], pairs: list[tuple[int, int]]) -> list[tuple[int, ...]]:
    """Maximal cliques (2+ members) of the graph ``(nodes, pairs)``, each sorted, ordered
    by their members.

    Source: Bron & Kerbosch, "Algorithm 457: finding all cliques of an undirected
    graph", *CACM* 16 (1973), with Tomita's pivot (Tomita, Tanaka & Takahashi,
    *Theor. Comput. Sci.* 363 (2006) 28-42). Only nodes with an edge are expanded.
    """
    adj: dict[int, set[int]] = {}
    for a, b in pairs:
        if a != b:
            adj.setdefault(a, set()).add(b)
            adj.setdefault(b, set()).add(a)
    keep = set(nodes)
    adj = {v: nb & keep for v, nb in adj.items() if v in keep}
    out: list[tuple[int, ...]] = []

    def expand(r: list[int], p: set[int], x: set[int]) -> None:
        if not p and not x:
            if len(r) >= 2:
                out.append(tuple(sorted(r)))
            return
        pivot = max(p | x, key=lambda v: len(adj[v] & p))
        for v in sorted(p - adj[pivot]):
            expand([*r, v], p & adj[v], x & adj[v])
            p = p - {v}
            x = x | {v}

    expand([], set(adj), set())
    return sorted(out)


def detect(
    e: FloatArray,
    loaded: BoolArray,
    node_keys: tuple[str, ...],
    cfg: DetectorConfig,
    censored: BoolArray | None = None,
) -> Detection:
    """Run Detector A (and B if configured) and group the nodes.

    Args:
        e: residuals ``(n, R)`` from :func:`~netcheck.analysis.timing.median_polish`,
            NaN where not observed.
        loaded: schedule bits ``(n, R)``.
        node_keys: the ``n`` node keys, in row order.
        censored: ``(n, R)`` bool, cells imputed at the deadline for a missing result.
            Detector A uses them (slow when co-loaded is the signal); Detector B ignores
            them: imputed cells carry no noise, so two nodes censored in the same rounds
            would correlate through the round effects alone.
    Returns:
        :class:`Detection`: mutual Detector A edges, Detector B edges, and the suspect
        groups of their union (``cfg.grouping``: maximal cliques, or connected
        components). With ``cfg.drop_full_rounds`` the rounds in which every node was
        loaded are left out first.
    Raises:
        ValueError: on mismatched shapes.
    """
    n = e.shape[0]
    if loaded.shape != e.shape or len(node_keys) != n:
        raise ValueError("e, loaded and node_keys must agree in shape")
    if cfg.drop_full_rounds and n > 1:
        keep = ~loaded.all(axis=0)
        e, loaded = e[:, keep], loaded[:, keep]
        censored = None if censored is None else censored[:, keep]
    p_crit = cfg.p_crit(n)
    edges: dict[tuple[int, int], Edge] = {}
    if cfg.forward_selection:
        chosen: dict[tuple[int, int], Selection] = {}
        for sel in forward_selection(e, loaded, cfg):
            chosen.setdefault((sel.i, sel.j), sel)
        for (i, j), s in chosen.items():
            back = chosen.get((j, i))
            if i < j and back is not None:
                weak = s if s.p / s.p_threshold >= back.p / back.p_threshold else back
                kind = "A-group" if "group" in (s.step, back.step) else "A"
                edges[(i, j)] = Edge(
                    node_keys[i], node_keys[j], kind, weak.t, weak.df,
                    weak.p, weak.p_threshold, min(s.effect, back.effect),
                    cfg.effect_floor, min(s.n_rounds, back.n_rounds),
                )  # fmt: skip
        if cfg.reverse_test:
            one_way = [s for (i, j), s in sorted(chosen.items()) if (j, i) not in chosen]
            for rv in reverse_tests(e, loaded, one_way, cfg):
                if rv.passed:
                    key = (min(rv.i, rv.j), max(rv.i, rv.j))
                    edges.setdefault(key, Edge(
                        node_keys[key[0]], node_keys[key[1]], "A-reverse", rv.t, rv.df,
                        rv.p, rv.p_threshold, rv.effect, cfg.effect_floor, rv.n_rounds,
                    ))  # fmt: skip
    else:
        pw = pairwise_welch(e, loaded, cfg.min_rounds)
        hit = (pw.p < p_crit) & (pw.effect > cfg.effect_floor)
        mutual = hit & hit.T
        for i, j in zip(*np.nonzero(np.triu(mutual, 1)), strict=True):
            wi, wj = (i, j) if pw.t[i, j] <= pw.t[j, i] else (j, i)
            edges[(int(i), int(j))] = Edge(
                node_keys[i], node_keys[j], "A-welch", float(pw.t[wi, wj]), float(pw.df[wi, wj]),
                float(max(pw.p[i, j], pw.p[j, i])), p_crit,
                float(min(pw.effect[i, j], pw.effect[j, i])), cfg.effect_floor,
                int(min(pw.n1[i, j] + pw.n0[i, j], pw.n1[j, i] + pw.n0[j, i])),
            )  # fmt: skip
    if cfg.use_correlation:
        e_b = e if censored is None else np.where(censored, np.nan, e)
        ct = residual_correlation(e_b, cfg.min_coloaded_rounds)
        hit = (ct.p < p_crit) & (ct.r > cfg.r_floor)
        for i, j in zip(*np.nonzero(np.triu(hit, 1)), strict=True):
            key = (int(i), int(j))
            if key not in edges:
                edges[key] = Edge(
                    node_keys[i], node_keys[j], "B", float(ct.z[i, j]), math.inf,
                    float(ct.p[i, j]), p_crit, float(ct.r[i, j]), cfg.r_floor,
                    int(ct.n[i, j]),
                )  # fmt: skip
    if cfg.grouping == "cliques":
        comps = [list(c) for c in maximal_cliques(list(range(n)), sorted(edges))]
    else:
        comps = connected_components(n, sorted(edges))
    groups = []
    for comp in comps:
        members = set(comp)
        g_edges = tuple(ed for (i, j), ed in sorted(edges.items()) if i in members and j in members)
        groups.append(SuspectGroup(tuple(node_keys[k] for k in comp), g_edges))
    return Detection(tuple(edges[k] for k in sorted(edges)), tuple(groups), cfg.z_crit(n), p_crit)
