"""Contention detectors (pure): which nodes slow each other down across screening rounds.

detection.md §2. Input: median-polish residuals ``e`` (shape ``(n, R)``, NaN where the
node was not loaded) and the schedule bits ``loaded`` (``(n, R)`` bool). Output: edges
with their statistic, threshold and effect (the evidence), and suspect groups = the
connected components of the union of the edge sets.

- Detector A (:func:`forward_selection`): per node, greedy forward selection of the
  nodes whose load predicts its slowdown, partial t-tests; mutual edges only.
  :func:`pairwise_welch` is the plain one-step version (Welch 1947), kept as baseline.
- Detector B (:func:`residual_correlation`): correlation of two nodes' residuals over
  the rounds where both were loaded, Fisher z; catches groups of 3+ where the other
  members' load makes both residuals move together.

Multiple testing: every test is one-sided (contention only slows) at level
``alpha / (n (n - 1))`` (Bonferroni over ordered pairs), i.e.
``z_crit = Phi^-1(1 - alpha / (n (n - 1)))``, about 5.0 for n = 200 and alpha = 0.01.
t statistics are compared through their exact Student-t tail, not against ``z_crit``
directly: with the handful of rounds per node of a short screening, a t with 10
degrees of freedom exceeds 5 about 100 times more often than a normal deviate does.
Significance alone is not enough (honest co-hosted GPUs couple by a few percent), so
every edge must also clear an effect-size floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

_LGAMMA = np.vectorize(math.lgamma, otypes=[np.float64])
_TINY = 1e-300


@dataclass(frozen=True)
class DetectorConfig:
    """Thresholds of the screening detectors, with their documented defaults.

    - ``alpha`` (0.01): family-wise error rate of each detector over all ordered pairs
      (Bonferroni).
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
    """

    alpha: float = 0.01
    effect_floor: float = math.log(1.25)
    min_rounds: int = 2
    min_coloaded_rounds: int = 8
    r_floor: float = 0.5
    max_partners: int = 8
    forward_selection: bool = True
    use_correlation: bool = True
    prior_df: float = 10.0

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError("alpha must be in (0, 1)")
        if self.effect_floor < 0 or not 0.0 <= self.r_floor < 1.0:
            raise ValueError("effect_floor must be >= 0 and r_floor in [0, 1)")
        if self.min_rounds < 2 or self.min_coloaded_rounds < 4 or self.max_partners < 1:
            raise ValueError("need min_rounds >= 2, min_coloaded_rounds >= 4, max_partners >= 1")
        if self.prior_df < 0:
            raise ValueError("prior_df must be >= 0")

    def p_crit(self, n_nodes: int) -> float:
        """Per-test one-sided level ``alpha / (n (n - 1))`` (Bonferroni)."""
        return self.alpha / max(n_nodes * (n_nodes - 1), 1)

    def z_crit(self, n_nodes: int) -> float:
        """``Phi^-1(1 - alpha / (n (n - 1)))``: the Bonferroni bound as a normal deviate."""
        return -NormalDist().inv_cdf(self.p_crit(n_nodes))


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


def _betacf(a: FloatArray, b: FloatArray, x: FloatArray) -> FloatArray:
    """Continued fraction of the incomplete beta function (modified Lentz).

    Source: Press et al., *Numerical Recipes*, 3rd ed., §6.4 (``betacf``).
    """
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones_like(x)
    d = 1.0 - qab * x / qap
    d = 1.0 / np.where(np.abs(d) < _TINY, _TINY, d)
    h = d.copy()
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / np.where(np.abs(d) < _TINY, _TINY, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / np.where(np.abs(d) < _TINY, _TINY, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        delta = d * c
        h *= delta
        if np.all(np.abs(delta - 1.0) < 1e-14):
            break
    return h


def _betainc(a: FloatArray, b: FloatArray, x: FloatArray) -> FloatArray:
    """Regularized incomplete beta ``I_x(a, b)``, elementwise (Numerical Recipes §6.4)."""
    x = np.clip(x, 0.0, 1.0)
    inner = (x > 0) & (x < 1)
    xs = np.where(inner, x, 0.5)
    log_front = _LGAMMA(a + b) - _LGAMMA(a) - _LGAMMA(b) + a * np.log(xs) + b * np.log1p(-xs)
    front = np.exp(log_front)
    direct = xs < (a + 1.0) / (a + b + 2.0)
    xa = np.where(direct, xs, 1.0 - xs)
    aa = np.where(direct, a, b)
    bb = np.where(direct, b, a)
    cf = _betacf(aa, bb, xa)
    value = np.where(direct, front * cf / a, 1.0 - front * cf / b)
    return np.where(inner, value, x)


def t_sf(t: FloatArray | float, df: FloatArray | float) -> FloatArray:
    """One-sided upper tail ``P(T > t)`` of Student's t with ``df`` (may be fractional).

    ``P(T > t) = I_{df/(df+t^2)}(df/2, 1/2) / 2`` for ``t >= 0`` (Abramowitz & Stegun
    26.7.1 / 26.5.27). NaN where ``t`` or ``df`` is NaN or ``df <= 0``.
    """
    t_arr, df_arr = np.broadcast_arrays(np.asarray(t, float), np.asarray(df, float))
    ok = np.isfinite(t_arr) & np.isfinite(df_arr) & (df_arr > 0)
    tt = np.where(ok, t_arr, 0.0)
    nu = np.where(ok, df_arr, 1.0)
    half = 0.5 * _betainc(nu / 2.0, np.full_like(nu, 0.5), nu / (nu + tt * tt))
    p = np.where(tt >= 0, half, 1.0 - half)
    return np.where(ok, p, np.nan)


def normal_sf(z: FloatArray | float) -> FloatArray:
    """``P(Z > z)`` for a standard normal, elementwise (via ``math.erfc``)."""
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    return np.asarray(0.5 * erfc(np.asarray(z, float) / math.sqrt(2.0)), dtype=np.float64)


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
    """One forward-selection step of node ``i``: partner ``j`` with its partial test."""

    i: int
    j: int
    t: float
    df: float
    p: float
    effect: float
    n_rounds: int


def _prior_variance(e: FloatArray) -> float:
    """Median over nodes of each node's residual variance (the moderation prior)."""
    counts = np.isfinite(e).sum(axis=1)
    rows = e[counts >= 3]
    if rows.size == 0:
        return 0.0
    return float(np.median(np.nanvar(rows, axis=1, ddof=1)))


def forward_selection(e: FloatArray, loaded: BoolArray, cfg: DetectorConfig) -> list[Selection]:
    """Detector A: for each node, greedily select the partners whose load slows it.

    For node i, on the rounds where i was observed, regress its residual on an intercept
    plus the load bits of the partners selected so far; for every other node j compute
    the partial t of adding j's load bit (the t of the OLS coefficient — at the first
    step this is the pooled two-sample t of "j loaded vs not"). Add the j with the
    largest t among those whose coefficient exceeds ``effect_floor``, while its
    one-sided p is below ``alpha / (n (n - 1))``. Regressing out the selected partners removes their share
    of the variance, so the remaining members of a larger group stand out.

    Sources: forward stepwise selection (Efroymson 1960, "Multiple regression analysis",
    in *Mathematical Methods for Digital Computers*; Hastie, Tibshirani & Friedman,
    *Elements of Statistical Learning*, 2nd ed., §3.3.2); Bonferroni bound; with
    ``prior_df > 0`` the variance is moderated toward the population median (Smyth,
    "Linear models and empirical Bayes methods...", *Stat. Appl. Genet. Mol. Biol.*
    3 (2004) art. 3). Returns every accepted step (directed).
    """
    n = e.shape[0]
    p_crit = cfg.p_crit(n)
    s0_sq = _prior_variance(e) if cfg.prior_df > 0 else 0.0
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
        for _ in range(cfg.max_partners):
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
            with np.errstate(divide="ignore", invalid="ignore"):
                coef = cy / cc
                rss = np.maximum(float(ry @ ry) - cy * cy / cc, 0.0)
                s2 = rss / dof
                if cfg.prior_df > 0:  # moderate upward only: never below the node's own
                    s2 = np.maximum(s2, (cfg.prior_df * s0_sq + dof * s2) / (cfg.prior_df + dof))
                t = coef / np.sqrt(s2 / cc)
            t = np.where(usable & np.isfinite(t) & (coef > cfg.effect_floor), t, -np.inf)
            j = int(np.argmax(t))
            df_t = dof + cfg.prior_df
            p = float(t_sf(t[j], df_t))
            if not (p < p_crit and coef[j] > cfg.effect_floor):
                break
            out.append(Selection(i, j, float(t[j]), df_t, p, float(coef[j]), n_i))
            eligible[j] = False
            x = np.hstack([x, c[:, j : j + 1]])
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
        :class:`Detection`: mutual Detector A edges, Detector B edges, and the connected
        components of their union as suspect groups.
    Raises:
        ValueError: on mismatched shapes.
    """
    n = e.shape[0]
    if loaded.shape != e.shape or len(node_keys) != n:
        raise ValueError("e, loaded and node_keys must agree in shape")
    p_crit = cfg.p_crit(n)
    edges: dict[tuple[int, int], Edge] = {}
    if cfg.forward_selection:
        chosen = {(s.i, s.j): s for s in forward_selection(e, loaded, cfg)}
        for (i, j), s in chosen.items():
            back = chosen.get((j, i))
            if i < j and back is not None:
                weak = s if s.t <= back.t else back
                edges[(i, j)] = Edge(
                    node_keys[i], node_keys[j], "A", weak.t, weak.df,
                    max(s.p, back.p), p_crit, min(s.effect, back.effect),
                    cfg.effect_floor, min(s.n_rounds, back.n_rounds),
                )  # fmt: skip
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
    comps = connected_components(n, sorted(edges))
    groups = []
    for comp in comps:
        members = set(comp)
        g_edges = tuple(ed for (i, j), ed in sorted(edges.items()) if i in members)
        groups.append(SuspectGroup(tuple(node_keys[k] for k in comp), g_edges))
    return Detection(tuple(edges[k] for k in sorted(edges)), tuple(groups), cfg.z_crit(n), p_crit)
