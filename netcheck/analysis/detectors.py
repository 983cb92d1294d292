"""Contention detectors (pure): which nodes slow each other down across screening rounds.

detection.md §2. Input: median-polish residuals ``e`` (shape ``(n, R)``, NaN where the
node was not loaded) and the schedule bits ``loaded`` (``(n, R)`` bool). Output: edges
with their statistic, threshold and effect (the evidence), and suspect groups = the
connected components of the union of the edge sets.

Layout: thresholds and result types in :mod:`netcheck.analysis.detector_config`,
Detector A in :mod:`netcheck.analysis.detector_a`, the Student-t and normal tails in
:mod:`netcheck.analysis.tails`; Detector B, the grouping and :func:`detect` here.

- Detector A (:func:`~netcheck.analysis.detector_a.forward_selection`): per node, greedy forward selection of the
  nodes whose load predicts its slowdown, partial t-tests, with group steps that add
  2..4 partners at once through the count of them loaded; an edge needs both nodes'
  rows to select each other, or one row's selection plus a reverse test in the other
  row (:func:`~netcheck.analysis.detector_a.reverse_tests`).
  :func:`~netcheck.analysis.detector_a.pairwise_welch` is the plain one-step version
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

from netcheck.analysis.detector_a import (
    Selection,
    forward_selection,
    pairwise_welch,
    reverse_tests,
)
from netcheck.analysis.detector_config import Detection, DetectorConfig, Edge, SuspectGroup
from netcheck.analysis.mutual import mutual_hits, mutual_level, mutual_test
from netcheck.analysis.tails import normal_sf

__all__ = [
    "CorrelationTest",
    "Detection",
    "DetectorConfig",
    "Edge",
    "SuspectGroup",
    "connected_components",
    "detect",
    "maximal_cliques",
    "residual_correlation",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


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
    full_rounds: BoolArray | None = None,
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
        full_rounds: ``(R,)`` bool, the rounds that loaded every node *by rule* (kind
            ``full``), as the caller knows from the stored round kinds. ``None``: every
            round in which all ``n`` nodes are loaded is taken as a full round (callers
            without round kinds). A screening round's independent coins load all ``n``
            nodes with probability ``q^n``: at ``n = 2`` that is every both-loaded round
            of the pair (the contention arm itself) and at ``n = 3`` one round in 8, so
            the analysis of stored rounds passes the kinds (the live run of two
            identities on one H200 found no edge before, session 9).
    Returns:
        :class:`Detection`: mutual Detector A edges, Detector B edges, and the suspect
        groups of their union (``cfg.grouping``: maximal cliques, or connected
        components). With ``cfg.drop_full_rounds`` the full rounds (``full_rounds``)
        are left out first.
    Raises:
        ValueError: on mismatched shapes.
    """
    n = e.shape[0]
    if loaded.shape != e.shape or len(node_keys) != n:
        raise ValueError("e, loaded and node_keys must agree in shape")
    if full_rounds is not None and full_rounds.shape != (e.shape[1],):
        raise ValueError("full_rounds must have one entry per round")
    if cfg.drop_full_rounds and n > 1:
        keep = ~(loaded.all(axis=0) if full_rounds is None else full_rounds)
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
    if cfg.mutual_test and n > 1:
        mt = mutual_test(e, loaded, cfg)
        level = mutual_level(mt, cfg)
        nominate_floor = (
            cfg.effect_floor if cfg.mutual_nominate_floor is None else cfg.mutual_nominate_floor
        )
        for i, j in zip(*np.nonzero(mutual_hits(mt, cfg)), strict=True):
            edges.setdefault((int(i), int(j)), Edge(
                node_keys[i], node_keys[j], "A-mutual", float(mt.z[i, j]), math.inf,
                float(mt.p[i, j]), level, float(np.nanmin([mt.effect[i, j], mt.effect[j, i]])),
                nominate_floor, int(min(mt.n_rounds[i, j], mt.n_rounds[j, i])),
            ))  # fmt: skip
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
