"""Configuration and results of the contention detectors (pure data; docs/detection.md §2).

:class:`DetectorConfig` holds the thresholds and the split of ``alpha`` over the test
families; :class:`Edge`, :class:`SuspectGroup` and :class:`Detection` are what
:func:`netcheck.analysis.detectors.detect` returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist


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
    - ``mutual_min_rounds`` (1; 2 before session 8): the same for the mutual pair test.
      Its variance is moderated by the prior (``prior_df``), so one round in an arm
      still gives a t with ``n1 + n0 - 2 + prior_df`` degrees of freedom (an arm pair of
      1 and 1 has no own variance and stays untestable). Screening only nominates. At 2,
      a pair needed 2 rounds in each of three arms, which 24 screening rounds give with
      probability 0.973 and 12 with 0.558; at 1, 0.997 and 0.906
      (:func:`~netcheck.analysis.schedule.pair_coverage`). Measured (session 8, 12
      seeds, local): jitter pairs found by 32 rounds 0.94 -> 0.98, plain pairs by 16
      rounds 0.74 -> 0.90, for about twice the honest suspects.
    - ``mutual_one_way`` (True; session 9): a pair for which only one direction is
      testable (the other member was never loaded while the first was not, or the
      reverse) is judged on that direction's z alone, its effect above
      ``effect_floor``; before, it was untestable. Under the null that z is standard
      normal like Stouffer's, so the nomination level is unchanged. Pair coverage at 12
      screening rounds (16 rounds) goes 0.906 -> 0.968, at 16 0.970 -> 0.990
      (:func:`~netcheck.analysis.schedule.pair_coverage`, ``either_direction``).
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
    - ``mutual_test`` (True): the mutual pair test (:mod:`netcheck.analysis.mutual`):
      both directions of a pair combined (Stouffer), at its own level ``alpha`` over the
      ``n (n - 1) / 2`` unordered pairs (like Detector B), for pairs whose evidence falls
      short in each row alone (noisy or jittered timing, short windows).
    - ``mutual_fdr`` (0.75; 0.25 in sessions 5-7): the mutual pair test nominates at a
      **false discovery rate** instead: Benjamini-Hochberg (*J. R. Stat. Soc. B* 57 (1995) 289-300) at
      this q over the testable unordered pairs, never stricter than the Bonferroni level
      above (0 = Bonferroni only, before session 5). Screening only *nominates*: the
      error bound of a flag is the confirmation's, which tests each nominee again on
      its own rounds, so the screening level trades recall against confirmation rounds
      spent on honest nominees, not against false flags. Bonferroni over ``n (n - 1) /
      2`` pairs (z 4.05 at 200 identities, 4.75 at 1,000) left a third of jittered pairs
      un-nominated by 32 rounds; BH adapts to how many pairs look slowed. Session 8
      measured 0.25 / 0.5 / 0.75 (``benchmarks/detection_levers.py``, device, 20 seeds):
      farm pairs missed by 32 rounds were never suspected, their z just under the BH
      level; 0.75 finds up to 0.21 more of them (jitter at sigma_w 0.15) for 1.1-1.7x the
      confirmation rounds and about 4x the honest suspects per analysis at sigma_w 0.15,
      with no false flag over 320 honest analyses. (BH controls
      the FDR under positive dependence, Benjamini & Yekutieli, *Ann. Stat.* 29 (2001)
      1165-1188; pairs sharing a node are positively dependent through its row.)
    - ``mutual_fdr_family`` (``"nominable"``): the p-values BH reads: a pair whose
      effects miss the floors (never nominated) enters with ``p = 1``, so pairs that
      slow each other below the floor, e.g. an operator's own identities doing so on
      purpose, cannot loosen the level for honest pairs
      (:func:`~netcheck.analysis.mutual.mutual_level`); ``"all"``: each pair's own p
      (the first session-5 version: more recall for farms whose estimates sit near
      the floor, beta 0.3 pairs found by 32 rounds 0.85 vs 0.73; docs/detection.md).
    - ``mutual_nominate_floor`` (None: ``effect_floor``): the floor of the mutual test's
      *nomination* only, in log units (:func:`~netcheck.analysis.mutual.mutual_hits`);
      the BH family keeps ``effect_floor`` (``mutual_fdr_family``), so pairs between the
      two floors can be nominated but cannot loosen the level for others. Below
      ``effect_floor`` it lets through farm pairs whose *marginal* slowdown is diluted
      (in a farm of 3 at beta 0.3, the third member's load sits in both arms: log 1.6 /
      1.3 = 0.21 when it is loaded, log 1.3 = 0.26 when not) at the price of more honest
      co-hosted suspects; confirmation keeps its own floor test
      (:class:`~netcheck.analysis.confirm.ConfirmConfig`), so it nominates, never flags.
    - ``grouping`` (``"cliques"``): suspect groups are the maximal cliques of the edge
      graph, so a group never holds two nodes without an edge between them (a chain
      a-b, b-c gives the groups {a, b} and {b, c}); ``"components"`` = the previous
      connected components, under which a few stray edges merge unrelated farms.
    - ``drop_full_rounds`` (True): rounds in which every node was loaded are left out
      (they are no random design: every farm is slowed at once, so residuals of
      unrelated identities move together and link them).
    - ``round_prior_cells`` (8): the residuals the detectors read come from a median
      polish whose round effects carry an L1 penalty worth this many cells at 0
      (:func:`~netcheck.analysis.timing.median_polish`, ``col_prior_cells``; LAD-lasso,
      Wang, Li & Jiang 2007). With Tukey's polish (0) a farm that makes up half of a
      round's loaded nodes (small populations, big farms) *is* the round's median and
      its contention is read as the round's effect: the saved failing live run of 6
      nodes found no edge. With 8, a farm's ``K`` loaded identities move a round's
      effect only when ``K`` exceeds the round's other loaded nodes plus 8; a real
      round effect in a round of ``m`` loaded nodes is still removed up to the
      ``(m - 8) / 2m`` quantile of its cells (nearly all of it for ``m >= 50``), and in
      rounds of fewer than 8 it is left in the residuals as noise, which is
      independent of the random schedule and so biases no test.
    """

    alpha: float = 0.5
    effect_floor: float = math.log(1.25)
    min_rounds: int = 2
    mutual_min_rounds: int = 1
    mutual_one_way: bool = True
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
    mutual_test: bool = True
    mutual_fdr: float = 0.75
    mutual_fdr_family: str = "nominable"
    mutual_nominate_floor: float | None = None
    grouping: str = "cliques"
    drop_full_rounds: bool = True
    round_prior_cells: int = 8

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError("alpha must be in (0, 1)")
        if not 0.0 <= self.mutual_fdr < 1.0:
            raise ValueError("mutual_fdr must be in [0, 1)")
        if self.mutual_fdr_family not in ("nominable", "all"):
            raise ValueError("mutual_fdr_family must be 'nominable' or 'all'")
        if self.effect_floor < 0 or not 0.0 <= self.r_floor < 1.0:
            raise ValueError("effect_floor must be >= 0 and r_floor in [0, 1)")
        if self.mutual_nominate_floor is not None and not (
            0.0 <= self.mutual_nominate_floor <= self.effect_floor
        ):
            raise ValueError("mutual_nominate_floor must be in [0, effect_floor]")
        if self.min_rounds < 2 or self.min_coloaded_rounds < 4 or self.max_partners < 1:
            raise ValueError("need min_rounds >= 2, min_coloaded_rounds >= 4, max_partners >= 1")
        if self.mutual_min_rounds < 1:
            raise ValueError("need mutual_min_rounds >= 1")
        if self.prior_df < 0:
            raise ValueError("prior_df must be >= 0")
        if self.group_step < 1 or self.group_candidates < 2:
            raise ValueError("need group_step >= 1 and group_candidates >= 2")
        if self.group_pool < 2:
            raise ValueError("need group_pool >= 2")
        if not 0.0 < self.group_guard_p < 1.0:
            raise ValueError("group_guard_p must be in (0, 1)")
        if self.round_prior_cells < 0:
            raise ValueError("round_prior_cells must be >= 0")
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

    def p_crit_mutual(self, n_nodes: int) -> float:
        """Level of the mutual pair test: ``alpha / (n (n - 1) / 2)`` (Bonferroni over
        unordered pairs)."""
        return self.alpha / max(n_nodes * (n_nodes - 1) / 2.0, 1.0)

    def z_crit(self, n_nodes: int) -> float:
        """``Phi^-1(1 - alpha / (n (n - 1)))``: the Bonferroni bound as a normal deviate."""
        return -NormalDist().inv_cdf(self.p_crit(n_nodes))


@dataclass(frozen=True)
class Edge:
    """One detector's evidence that ``a`` and ``b`` share a backend.

    ``detector``: ``"A"`` (forward selection), ``"A-group"``, ``"A-reverse"``,
    ``"A-mutual"`` (the mutual pair test), ``"A-welch"`` (plain pairwise Welch) or
    ``"B"`` (residual correlation). ``statistic``: the smaller of the two directions'
    t (A), the combined Stouffer z (A-mutual) or the Fisher z (B); ``df``: its degrees
    of freedom (``inf`` for z).
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
