"""Persistent slowness against the profile's reference time (pure: no I/O, no clock).

A *padding* farm holds every identity's answer back to the farm's worst case (all k
identities loaded), so an identity's time does not depend on which others are loaded:
the contention tests see nothing. What it cannot hide is that every identity is slow
*in every round*: one card of the claimed class serving k batches takes about
``t_ref * (1 + beta * (k - 1))``. This module tests, per node, whether its service time
is persistently above what one card of the class gives (docs/detection.md, "Persistent
slowness").

Test (per node, over its loaded ``screening`` rounds of the analysis window; full and
confirmation rounds are left out: a full round loads every co-hosted neighbour, which
slows an honest node by the benign coupling in *every* such round):

- ``ratio[r] = service_s[r] / t_ref_s`` with ``service_s`` as everywhere
  (:meth:`~netcheck.analysis.timing.TimingRow.service_s`: arrival - release - echo
  RTT); a loaded round without a result counts as above the floor (it delivered
  nothing in time);
- ``H0``: ``P(ratio > floor) <= 1/2`` in every round of the reference mix (screening
  load probability ``q = 1/2``) — the node's median time is at most ``floor * t_ref``
  (``floor`` 1.25: the spread between cards of one class, a few %, plus benign
  co-hosting coupling of up to 20% in the rounds where a neighbour is loaded too);
  ``H1``: above. The **sign test**: with ``above`` of ``n`` rounds above the floor,
  ``p = P(Binomial(n, pi0) >= above)``, ``pi0 = 1/2`` at ``q = 1/2`` (exact; rounds
  independent, no assumption on the shape of the noise, so heavy-tailed or bimodal
  honest timing does not inflate it; Conover, *Practical Nonparametric Statistics*,
  3rd ed., §3.4). As for the contention floor (:mod:`netcheck.analysis.confirm`), the
  floor is the null hypothesis, not a threshold on a point estimate.
- **Other load probabilities** (session 9, :func:`null_rate`): the rounds of a node
  whose co-hosted neighbour is loaded too are a share ``q`` of its screening rounds, so
  at ``q = 2/3`` an honest card 4% slow coupled 20% has its median there (1.25). The
  test holds ``H0`` for the same nodes at every ``q`` by testing ``P(ratio > floor) <=
  pi0 = max(1/2, q)``: with ``A = P(X > floor)`` and ``B = P(c X > floor) >= A`` for
  the node's time ``X`` without the neighbour and coupling ``c >= 1``, a node in
  ``H0`` at 1/2 has ``A + B <= 1``, hence ``(1 - q) A + q B <= (1 - q) + (2q - 1) B
  <= q`` for ``q >= 1/2`` and ``<= 1/2`` for ``q < 1/2``; a node without a neighbour
  has ``A <= 1/2``. The bound is reached (a card between ``floor / c`` and ``floor``
  with no noise is above exactly when coupled). It assumes one co-hosted neighbour
  per node, as the floor does.
- **Rounds of several load probabilities** (session 11, :func:`window_null_rate`): the
  window can hold rounds run at several ``q`` (an operator changed
  ``screening_load_probability`` and restarted; the old rounds stay for up to
  ``screening_window_rounds``). Each round is taken at the ``q`` its stored schedule
  rule carries (the coordinator passes them in; a round without one takes the
  configured ``q``), and a node is tested at the largest ``null_rate`` over the ``q``
  of its own rounds. Under ``H0`` a round at ``q`` is above the floor with probability
  at most ``null_rate(q)`` (the bound above, per round: the neighbour's coin is drawn
  per round), so the count above is a Poisson-binomial with rates at most the largest
  one, stochastically below the binomial at it, and the lifetime bound holds across
  the change. The largest is the conservative end: judging rounds of ``q`` 2/3 at the
  rate 1/2 of a new configured ``q`` 1/2 holds honest coupled nodes to a null they do
  not meet (at the bound, 2/3 of their rounds above, against 1/2). With one ``q``
  throughout it is the test at that ``q``, bit for bit.
- **Error spending across analyses**: the window is re-tested at every analysis; the
  ``look``-th test of a node runs at ``alpha * 6 / (pi^2 look^2)``, which sums to
  ``alpha`` over all looks, so a node whose median sits at the floor is flagged with
  probability at most ``alpha`` over its whole life (:func:`spent_level`).
- **Reference check**: when the median over nodes of their median ratio is above the
  floor, ``t_ref`` does not describe this population (a stale or wrong profile, a slow
  coordinator): nothing is flagged and the report says so.
- **No flag by itself** (session 6): a rejection makes the node a candidate of the
  alone stage (:mod:`netcheck.analysis.alone`), which alone raises the ``slow`` flag.
  The floor's null is violated by honest nodes too: a card 17% slow coupled 20% to a
  co-hosted neighbour has its median screening ratio near 1.35 (measured, the
  benchmark's false-flag population), but alone it is at 1.17, under the alone floor.
  ``SlownessConfig.direct_flags`` keeps the behaviour before (a rejection flags).

What escapes (docs/detection.md, "What escapes, and why"): a farm whose padded time
is within the floor (for example two identities on a card of the class at ``beta <= 0.25``, or any farm on a
backend fast enough that ``t_ref * (1 + beta (k - 1)) / f <= floor * t_ref``); a
plain (unpadded) pair is slow only in the half of its rounds where its sibling is
loaded, like a co-hosted honest pair, so this test does not see it (contention does).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from netcheck.analysis import rules
from netcheck.analysis.evidence import latency, receipt
from netcheck.analysis.schedule import round_mixes
from netcheck.analysis.screening import timing_rows
from netcheck.records import FlagKind, RoundKind, StoredRounds

SLOW = FlagKind.SLOW


@dataclass(frozen=True)
class SlownessConfig:
    """Settings of the persistent-slowness test (module docstring).

    ``floor``: the ratio to ``t_ref`` an honest node's median stays below (1.25);
    ``alpha``: a node's lifetime false-flag level at the floor, spent over looks
    (0.01); ``min_rounds``: loaded screening rounds a node needs to be tested (8);
    ``direct_flags``: a rejection flags the node ``slow`` by itself (the behaviour
    before session 6); False (default): it only makes the node a candidate of the alone
    stage (module docstring). The coordinator takes ``floor``, ``alpha`` and
    ``min_rounds`` from its config (``slowness_floor``, ``slowness_alpha``,
    ``slowness_min_rounds``; the defaults are these).

    Raises:
        ValueError: ``floor <= 1``, ``alpha`` outside (0, 1) or ``min_rounds < 1``.
    """

    floor: float = 1.25
    alpha: float = 0.01
    min_rounds: int = 8
    direct_flags: bool = False

    def __post_init__(self) -> None:
        if not self.floor > 1.0 or not 0.0 < self.alpha < 1.0 or self.min_rounds < 1:
            raise ValueError("need floor > 1, 0 < alpha < 1 and min_rounds >= 1")


def floor_problem(
    floor: float, profile: str, t_ref_s: float, result_timeout_s: float
) -> str | None:
    """Why ``slowness_floor`` = ``floor`` turns the test off for ``profile``, or None.

    The coordinator stops collecting results ``result_timeout_s`` after the release, so
    no answered round has a ratio above ``result_timeout_s / t_ref_s``; at a floor at or
    above it no answered round is ever above the floor, and the test (with the alone
    stage it feeds, hence every ``slow`` flag) can never fire. A warning, not an error:
    an operator may mean to switch the stage off.

    Args:
        floor: the coordinator's ``slowness_floor`` (ratio to ``t_ref``).
        profile: the profile's name, for the message.
        t_ref_s: the profile's ``[deadline] t_ref_s``, seconds.
        result_timeout_s: the profile's ``result_timeout_s``, seconds.
    """
    if floor * t_ref_s < result_timeout_s:
        return None
    return (
        f"slowness_floor = {floor:g}: for profile {profile}, {floor:g} x t_ref_s "
        f"({t_ref_s:g} s) = {floor * t_ref_s:.4g} s is at or above its result_timeout_s "
        f"({result_timeout_s:g} s), the longest service time the coordinator measures: no "
        "answered round can be above the floor, so the persistent-slowness stage (and the "
        "alone stage's slow flags it feeds) can never fire. Set slowness_floor near the "
        f"spread of the class's cards (default {SlownessConfig.floor:g}; `netcheck engine "
        "pool` reports the floor a class needs)"
    )


def spent_level(alpha: float, look: int) -> float:
    """The level of the ``look``-th test (1-based): ``alpha * 6 / (pi^2 look^2)``;
    the levels of all looks sum to ``alpha``.

    Raises:
        ValueError: ``look < 1``.
    """
    if look < 1:
        raise ValueError("look is 1-based")
    return alpha * 6.0 / (math.pi**2 * look**2)


def sign_test_p(above: int, n: int, rate: float = 0.5) -> float:
    """One-sided sign test: ``P(Binomial(n, rate) >= above)`` (1.0 for ``n == 0``);
    ``rate`` 1/2 but for the screening test at another load probability
    (:func:`null_rate`)."""
    if n <= 0:
        return 1.0
    return float(stats.binom.sf(above - 1, n, rate))


def null_rate(load_probability: float) -> float:
    """The screening test's null rate of rounds above the floor at screening load
    probability ``q``: ``max(1/2, q)`` (module docstring, "Other load probabilities"):
    the largest ``P(ratio > floor)`` at ``q`` of a node whose median is at most the
    floor at ``q = 1/2``, with one co-hosted neighbour that only slows it.

    Raises:
        ValueError: ``load_probability`` outside (0, 1).
    """
    if not 0.0 < load_probability < 1.0:
        raise ValueError("load_probability must be in (0, 1)")
    return max(0.5, load_probability)


def window_null_rate(load_probabilities: Iterable[float]) -> float:
    """The sign test's null rate over rounds run at several load probabilities (an
    operator changed ``screening_load_probability`` and restarted while the window
    still holds rounds of the old one): the LARGEST :func:`null_rate` over them (module
    docstring, "Rounds of several load probabilities"). Larger is the conservative end:
    the test rejects less. A round at ``q`` is above the floor with probability at most
    ``null_rate(q)`` under ``H0``, so the count of rounds above is a Poisson-binomial
    with rates at most the largest one, stochastically below the binomial at it. (As
    ``null_rate`` is non-decreasing in ``q`` this is the rate at the largest ``q``.)

    Raises:
        ValueError: no load probability, or one outside (0, 1).
    """
    rates = [null_rate(q) for q in load_probabilities]
    if not rates:
        raise ValueError("need at least one load probability")
    return max(rates)


@dataclass(frozen=True)
class NodeSlowness:
    """The test of one node: the rounds used (oldest first), ``ratios`` (service time /
    ``t_ref``; None = loaded, no result), rounds ``above`` the floor out of ``n``, the
    median ratio (inf when half or more have no result), the sign test's ``p_value``,
    the ``level`` it was held to and whether it was ``flagged`` (the test rejected; for
    the screening test a ``slow`` flag only with ``direct_flags``, else a candidate of
    the alone stage). Screening test only (an alone test keeps the defaults: rate 1/2,
    no mixes): ``null_rate``, the rate the sign test ran at (:func:`window_null_rate`
    over the node's rounds), and ``mixes``, the load probabilities its rounds ran at
    with their counts, ascending (:func:`~netcheck.analysis.schedule.round_mixes`)."""

    node_key: str
    round_ids: tuple[str, ...]
    ratios: tuple[float | None, ...]
    above: int
    n: int
    median_ratio: float
    p_value: float
    level: float
    flagged: bool
    null_rate: float = 0.5
    mixes: tuple[tuple[float, int], ...] = ()

    def load_probabilities(self, default: float) -> tuple[float, ...]:
        """The load probabilities of the node's rounds (``mixes``), ``(default,)`` when
        none is recorded (an alone test, or a record built without them)."""
        return tuple(q for q, _ in self.mixes) or (default,)

    def from_config(self, load_probability: float) -> bool:
        """Every round of the node ran at ``load_probability`` (or none is recorded):
        the test is the one at that ``q`` alone."""
        return self.load_probabilities(load_probability) == (load_probability,)


@dataclass(frozen=True)
class SlownessReport:
    """Every tested node of one analysis, with the settings and the reference check
    (``population_median_ratio``: median over tested nodes of their median ratio;
    ``reference_ok``: it is within the floor; ``direct_flags``: the settings' option,
    rejections are ``slow`` flags by themselves; ``load_probability``: the screening
    rounds' configured ``q``; ``null_rate``: the sign test's rate under ``H0`` at the
    largest load probability of the window's rounds, :func:`window_null_rate`; each
    node's own rate, over its rounds only, is its :attr:`NodeSlowness.null_rate`;
    ``round_q``: the stored ``q`` of the rounds that have one, as passed in)."""

    t_ref_s: float
    floor: float
    alpha: float
    look: int
    level: float
    min_rounds: int
    population_median_ratio: float
    reference_ok: bool
    nodes: tuple[NodeSlowness, ...]
    direct_flags: bool = False
    load_probability: float = 0.5
    null_rate: float = 0.5
    round_q: Mapping[str, float] | None = None

    @property
    def flagged(self) -> tuple[NodeSlowness, ...]:
        """The nodes the test rejects (``slow`` flags or alone candidates)."""
        return tuple(n for n in self.nodes if n.flagged)

    @property
    def direct(self) -> tuple[NodeSlowness, ...]:
        """The nodes this report flags ``slow`` by itself: the rejected ones with
        ``direct_flags``, else none (they are candidates of the alone stage)."""
        return self.flagged if self.direct_flags else ()


def _median(ratios: Sequence[float | None]) -> float:
    return statistics.median(math.inf if r is None else r for r in ratios)


def persistent_slowness(
    stored: StoredRounds, t_ref_s: float, look: int, cfg: SlownessConfig | None = None,
    load_probability: float = 0.5, round_q: Mapping[str, float] | None = None,
) -> SlownessReport:  # fmt: skip
    """The persistent-slowness test of every node over the ``screening`` rounds of
    ``stored`` (module docstring), as the ``look``-th test (1-based) of these nodes.
    Confirmation rounds with screening coins (:mod:`netcheck.analysis.coins`) are not
    read: a coin node's co-hosted neighbour may be held and loaded by a plan in most of
    them, more often than a screening coin would, which raises an honest node's ratios
    (a level test would see it, the contention test does not: it conditions on the
    neighbour's load). The callers pass a window of screening rounds.

    ``t_ref_s``: the profile's reference batch time, seconds (its ``[capacity]`` t(1),
    else ``deadline.t_ref_s``). ``load_probability``: the screening rounds' load
    probability ``q`` (the coordinator's ``screening_load_probability``). ``round_q``:
    ``{round_id: q}``, the load probability each round ran at (its stored schedule
    rule); a round not in it, or every round when None, takes ``load_probability``.
    Each node is tested at the largest null rate over the load probabilities of its own
    rounds (:func:`window_null_rate`; module docstring, "Rounds of several load
    probabilities"); with one ``q`` throughout, the test at that ``q``, bit for bit.
    Nodes with fewer than ``cfg.min_rounds`` loaded screening rounds are not tested
    (not in the report).

    Raises:
        ValueError: ``t_ref_s <= 0``, ``look < 1``, or ``load_probability`` or a value
            of ``round_q`` outside (0, 1).
    """
    cfg = cfg or SlownessConfig()
    if not t_ref_s > 0:
        raise ValueError("t_ref_s must be positive")
    level = spent_level(cfg.alpha, look)
    null_rate(load_probability)  # raises outside (0, 1)
    screening = {r for r in stored.round_ids if stored.kinds.get(r) == RoundKind.SCREENING}
    order = {r: i for i, r in enumerate(stored.round_ids)}
    per_node: dict[str, list[tuple[str, float | None]]] = {}
    for row in timing_rows(stored):
        if not row.loaded or row.round_id not in screening:
            continue
        service = row.service_s()
        ratio = None if service is None else max(service, 0.0) / t_ref_s
        per_node.setdefault(row.node_key, []).append((row.round_id, ratio))
    tested: list[tuple[str, tuple[str, ...], tuple[float | None, ...], int]] = []
    for key in sorted(per_node):
        obs = sorted(per_node[key], key=lambda o: order[o[0]])
        if len(obs) < cfg.min_rounds:
            continue
        ratios = tuple(r for _, r in obs)
        above = sum(1 for r in ratios if r is None or r > cfg.floor)
        tested.append((key, tuple(rid for rid, _ in obs), ratios, above))
    medians = [_median(t[2]) for t in tested]
    pop = statistics.median(medians) if medians else math.nan
    ok = not pop > cfg.floor
    nodes = []
    for (key, rids, ratios, above), med in zip(tested, medians, strict=True):
        mixes = round_mixes(rids, round_q, load_probability)
        node_rate = window_null_rate(q for q, _ in mixes)
        p = sign_test_p(above, len(ratios), node_rate)
        nodes.append(NodeSlowness(key, rids, ratios, above, len(ratios), med, p, level,
                                  ok and p <= level, node_rate, mixes))  # fmt: skip
    window = round_mixes(sorted(screening), round_q, load_probability)
    rate = window_null_rate([q for q, _ in window] or [load_probability])
    return SlownessReport(t_ref_s, cfg.floor, cfg.alpha, look, level, cfg.min_rounds, pop, ok,
                          tuple(nodes), cfg.direct_flags, load_probability, rate,
                          round_q)  # fmt: skip


def slowness_evidence(
    node: NodeSlowness, report: SlownessReport, rows: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Evidence of a ``slow`` flag: the rule, the settings, per round the ratio and the
    raw latencies, the counts and p-value, the population's median ratio, and the
    receipts of those rounds. ``rows``: the node's stored result rows of
    ``node.round_ids``. To re-check: recompute ``service_s / t_ref_s`` from the
    latencies, count the rounds above ``floor`` and take the binomial tail (at
    ``null_rate`` when the record has one: a load probability other than 1/2). When the
    node's rounds did not all run at the configured load probability (``q`` changed
    while they were in the window), ``mixes`` lists each load probability with its
    rounds and null rate (``null_rate`` is the largest) and ``q_from_config`` the
    rounds without a stored ``q`` (judged at the configured one). A node record without
    ``mixes`` (built by hand) takes the report's rate."""
    rate = node.null_rate if node.mixes else report.null_rate
    q = report.load_probability
    mixed = not node.from_config(q)
    basis: dict[str, Any] = {}
    if rate != 0.5 or mixed:
        basis = {"load_probability": q, "null_rate": rate}
    if mixed:
        stored_q = report.round_q or {}
        basis["mixes"] = [{"load_probability": mq, "rounds": n, "null_rate": null_rate(mq)}
                          for mq, n in node.mixes]  # fmt: skip
        basis["q_from_config"] = [r for r in node.round_ids if r not in stored_q]
    return {
        "rule": rules.slow(report.floor, report.alpha, report.min_rounds, rate),
        "test": f"one-sided sign test, H0: P(service_s / t_ref_s > floor) <= {rate:g} per round"
        if rate != 0.5
        else "one-sided sign test, H0: P(service_s / t_ref_s > floor) <= 1/2 per round",
        **basis,
        "t_ref_s": report.t_ref_s,
        "floor": report.floor,
        "alpha": report.alpha,
        "look": report.look,
        "level": report.level,
        "min_rounds": report.min_rounds,
        "population_median_ratio": report.population_median_ratio,
        **node_record(node, rows),
    }


def node_record(node: NodeSlowness, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The evidence fields of one node's sign test (screening or alone): rounds, ratios,
    counts, median, p-value, and the raw latencies and receipts of those rounds from
    ``rows`` (stored result rows; other nodes' rows are ignored)."""
    mine = {r["round_id"]: r for r in rows if r.get("node_key") == node.node_key}
    return {
        "rounds": list(node.round_ids),
        "ratios": list(node.ratios),
        "above": node.above,
        "n": node.n,
        "median_ratio": node.median_ratio,
        "p_value": node.p_value,
        "latencies": {rid: latency(mine[rid]) for rid in node.round_ids if rid in mine},
        "receipts": [
            receipt(mine[rid])
            for rid in node.round_ids
            if rid in mine and mine[rid].get("signature")
        ],  # fmt: skip
    }
