"""The capacity test: late or missing answers as an error-controlled decision (pure: no
I/O, no clock).

A node whose card cannot serve its batch in time (identities sharing one GPU, loaded
together) answers after the round's deadline, or not at all, in many rounds. An honest
node of the class is late too, now and then: the deadline
(:meth:`netcheck.config.Profile.deadline_s`) sits above the 99th percentile of honest
batch times, but a node noisier than the calibration pool, or slowed by a co-hosted
neighbour, crosses it in a few % of its rounds. The rule before (3 late or missing
among the last 8 verdicts) had no error control: a node late 2% of the time meets it
in about 1 in 2,400 windows, and it is checked after every strike for the node's whole
life (issue 13: 1 honest node flagged over 1,000 simulated analyses at sigma_w 0.15;
docs/detection.md "Capacity test").

Test (per node, run when one of its rounds ends ``late`` or ``missing``):

- **Data**: the node's ``window`` most recent *timed* verdicts (``pass``, ``late``,
  ``missing``: rounds where its answer was judged against the deadline; a wrong or
  malformed answer, a round the coordinator could not serve, a disconnect neither count
  nor fill the window), ``x`` of them strikes (``late`` / ``missing``), ``n`` in all.
- ``H0``: in every round the node is late or missing with probability at most ``p0``
  (``p0`` = 2%: what an honest node of the class may show; rounds independent).
- **p-value, conditional on the look**: the test runs *because* the newest verdict is a
  strike, so that one is not evidence: ``p = P(Binomial(n - 1, p0) >= x - 1)``. (The
  unconditional tail ``P(Binomial(n, p0) >= x)`` is too small by about ``x / (n p0)``
  at a look chosen by a strike.) With the gaps between strikes geometric under ``H0``,
  the chance that the ``j``-th look rejects at level ``l`` is at most ``l``.
- **Error spending over the node's life**: the look at the node's ``k``-th strike ever
  (``k >= min_strikes``; fewer strikes never flag) runs at ``alpha * 6 / (pi^2 j^2)``,
  ``j = k - min_strikes + 1``; these sum to ``alpha``, so a node late with probability
  ``p0`` is flagged with probability at most ``alpha`` over its whole life, however
  long it runs (union bound), and far less below ``p0`` (:func:`look_level`).

**The null under the load probability** (session 9): ``p0`` is stated for the
reference round mix, screening rounds loading each node with probability ``q = 1/2``
and every 4th round full (:data:`REFERENCE_Q`, :data:`REFERENCE_FULL_EVERY`: the mix
the premise about honest cards was calibrated at; :func:`null_p0`). An honest node is late more often in the rounds in which its
co-hosted neighbour is loaded too (benign coupling; the deadline is calibrated on cards
alone), and the share of its timed rounds in which that neighbour is loaded grows with
the share of full rounds and with ``q`` above ``1 / (1 + sqrt(F))`` (1/3 at ``F = 4``;
below, full rounds dominate the node's timed rounds and it grows again as ``q`` falls) (:func:`coupled_share`: 0.70 at 1/2, 0.78 at
2/3, every 4th round full; 0.61 / 0.73 every 8th, 0.83 at 1/2 every 2nd). The test runs
at ``null_p0 = p0 * max(1, coupled_share(q, F) / coupled_share(1/2, 4))``, ``F`` the
deployment's ``screening_full_every``: every node whose late rate under the reference
mix is at most ``p0``, and whose rounds with the neighbour loaded are at least as late
as those without, is late in at most ``null_p0`` of its rounds at ``(q, F)`` (the
bound is reached by a node late only when coupled), so the lifetime bound ``alpha``
holds for the same nodes at every mix. At ``q = 1/2`` with ``F = 4`` it is ``p0``
exactly. A window can hold rounds run at several mixes (an operator changed
``screening_load_probability`` and restarted): each round's ``q`` is the one its stored
schedule rule carries (:func:`netcheck.analysis.schedule.rule_probability`; a round
whose rule carries none, i.e. a full or confirmation round or one without a stored
schedule, takes the configured ``q``), and the test runs at the *largest*
``null_p0`` over the window's mixes (:func:`window_null`; session 11): a node at most
``p0``-late under the reference mix is late in at most ``null_p0(q)`` of its rounds run
at ``q`` (as for one mix), so its strike count, a sum over rounds of rates each at most
the largest null, is stochastically below a binomial at that null (a Poisson-binomial
is dominated by the binomial at its largest rate), and the lifetime bound holds across
the change, whichever way ``q`` moved. Before, the window was judged at the configured
mix alone: after a move to a smaller null the rounds of the old mix were judged
anti-conservatively until they left the window (3.33% -> 3.00% at ``p0`` 3% from 2/3
to 1/2). Remaining limit: ``F`` is not stored per round, so every round is taken at
the configured ``F``; raising ``F`` (fewer full rounds, a smaller null) judges the
rounds run at the old ``F`` at the new null until they leave the window (3.33% ->
3.11% at 2/3 and ``p0`` 3% from every 4th to every 8th); lowering it errs the safe way.
(Session 9 divided by ``coupled_share(1/2, F)``, the deployment's own
cadence: ``p0`` stated at ``F``, not at the calibration's 4. That tested 15% looser at
``F = 8``, ``q = 2/3`` and was anti-conservative below ``F = 4``: 2.00% instead of
2.38% at ``F = 2``; review brk10.)

A farm identity late in a quarter of its rounds reaches ``p`` below the level within a
few strikes (3 strikes among 8 verdicts at the first look: ``p`` = 0.008 <= 0.018);
a long-lived node's later looks need more evidence, which a real shortage keeps
giving (12 strikes among 48 verdicts: ``p`` = 2e-9).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from netcheck.analysis import rules
from netcheck.analysis.evidence import latency, receipt
from netcheck.analysis.schedule import round_mixes
from netcheck.records import Verdict

STRIKES = frozenset({str(Verdict.LATE), str(Verdict.MISSING)})
"""Verdicts that count against the node: its answer came after the deadline or never."""
TIMED = frozenset({str(Verdict.PASS), *STRIKES})
"""Verdicts judged against the deadline: the test's trials."""


@dataclass(frozen=True)
class CapacityTestConfig:
    """Settings of :func:`capacity_test` (the coordinator's ``capacity_*`` fields).

    ``window``: timed verdicts tested (most recent); ``min_strikes``: strikes (in the
    window and in the node's life) before any test; ``p0``: late/missing probability
    per round an honest node may have (``H0``); ``alpha``: the node's lifetime error
    at ``p0``.

    Raises:
        ValueError: ``min_strikes < 2``, ``window < min_strikes``, ``p0`` or ``alpha``
            outside (0, 1), ``load_probability`` outside (0, 1) or ``full_every < 1``.
    """

    window: int = 48
    min_strikes: int = 3
    p0: float = 0.02
    alpha: float = 0.03
    load_probability: float = 0.5
    full_every: int = 4

    def __post_init__(self) -> None:
        if self.min_strikes < 2 or self.window < self.min_strikes:
            raise ValueError("need min_strikes >= 2 and window >= min_strikes")
        if not (0.0 < self.p0 < 1.0 and 0.0 < self.alpha < 1.0):
            raise ValueError("need 0 < p0 < 1 and 0 < alpha < 1")
        if not 0.0 < self.load_probability < 1.0 or self.full_every < 1:
            raise ValueError("need 0 < load_probability < 1 and full_every >= 1")

    @property
    def null_p0(self) -> float:
        """The late rate the test holds the node to: :func:`null_p0` of ``p0`` at
        ``load_probability`` and ``full_every`` (``p0`` itself at 1/2 with every 4th
        round full)."""
        return null_p0(self.p0, self.load_probability, self.full_every)


#: The reference round mix ``capacity_p0`` is stated at (module docstring): screening
#: rounds load each node with probability 1/2 ...
REFERENCE_Q = 0.5
#: ... and every 4th round is full (``screening_full_every`` 4, the calibration's).
REFERENCE_FULL_EVERY = 4


def coupled_share(q: float, full_every: int = 4) -> float:
    """The share of a node's timed screening-loop rounds in which one given other node
    (its co-hosted neighbour) is loaded too, at screening load probability ``q``: of
    every ``full_every`` rounds one is full (both loaded) and ``full_every - 1`` are
    screening rounds, where the node is loaded with probability ``q`` and the neighbour,
    independently, too: ``(1 + (F - 1) q^2) / (1 + (F - 1) q)``, ``F = full_every``
    (0.70 at 1/2, 0.78 at 2/3 with ``F = 4``; 1 with ``F = 1``). Confirmation rounds
    are not counted (they load by plan, not by ``q``).

    Raises:
        ValueError: ``q`` outside (0, 1) or ``full_every < 1``.
    """
    if not 0.0 < q < 1.0 or full_every < 1:
        raise ValueError("need 0 < q < 1 and full_every >= 1")
    screening = full_every - 1
    return (1.0 + screening * q * q) / (1.0 + screening * q)


def null_p0(p0: float, q: float, full_every: int = 4) -> float:
    """The capacity test's null late rate at load probability ``q`` with every
    ``full_every``-th round full, for ``p0`` stated at the reference mix (``q = 1/2``,
    every 4th round full; module docstring): ``p0 * max(1, coupled_share(q, full_every)
    / coupled_share(1/2, 4))``, at most 1 - 1e-9. A node's late rate is ``a + s (b -
    a)`` with ``a``/``b`` its late probabilities without/with the neighbour loaded (``a
    <= b``) and ``s`` the coupled share; with ``a + s_ref (b - a) <= p0`` its largest
    value at ``s > s_ref`` is ``p0 s / s_ref`` (``a = 0``), and at ``s <= s_ref`` it is
    ``p0`` (``a = b``). Exactly ``p0`` at the reference mix; at ``q = 2/3``: 1.11 ``p0``
    every 4th round full, 1.04 ``p0`` every 8th; at ``q = 1/2`` every 2nd: 1.19 ``p0``.

    Raises:
        ValueError: as :func:`coupled_share`.
    """
    reference = coupled_share(REFERENCE_Q, REFERENCE_FULL_EVERY)
    ratio = coupled_share(q, full_every) / reference
    return p0 if ratio <= 1.0 else min(p0 * ratio, 1.0 - 1e-9)


@dataclass(frozen=True)
class CapacityTest:
    """One look of :func:`capacity_test` at one node.

    ``rounds``/``strike_rounds``: round ids of the window and of its strikes, newest
    first; ``n``/``strikes``: their counts; ``look``: the node's strikes ever (this
    one included); ``p_value``; ``level``: the look's level (0 when no test ran);
    ``flagged``: ``p_value <= level``; ``null_p0``: the late rate tested (the largest
    over ``mixes``, :func:`window_null`); ``mixes``: ``(q, rounds of the window run at
    q)``, ascending ``q``; ``q_from_config``: the window's rounds without a stored ``q``
    (given the configured one), newest first.
    """

    rounds: tuple[str, ...]
    strike_rounds: tuple[str, ...]
    n: int
    strikes: int
    look: int
    p_value: float
    level: float
    flagged: bool
    null_p0: float
    mixes: tuple[tuple[float, int], ...]
    q_from_config: tuple[str, ...]


def look_level(look: int, cfg: CapacityTestConfig) -> float:
    """The level of the look at a node's ``look``-th strike ever:
    ``alpha * 6 / (pi^2 j^2)``, ``j = look - min_strikes + 1``; 0 before
    ``min_strikes`` strikes. Summed over all looks: ``alpha``."""
    j = look - cfg.min_strikes + 1
    return cfg.alpha * 6.0 / (math.pi**2 * j * j) if j >= 1 else 0.0


def window_null(mixes: Sequence[float], cfg: CapacityTestConfig) -> float:
    """The null late rate of a window whose rounds ran at load probabilities ``mixes``
    (one per round, or per distinct mix): the largest :func:`null_p0` of ``cfg.p0`` at
    those ``q``, every one at ``cfg.full_every`` (``F`` is not stored per round); the
    configured :attr:`CapacityTestConfig.null_p0` for an empty window. The largest
    null, not the null at the largest ``q``: :func:`coupled_share` is not monotone in
    ``q`` (smallest at ``q = 1 / (1 + sqrt(F))``, 1/3 at ``F = 4``). Equal to
    ``cfg.null_p0`` bit for bit when every ``q`` is ``cfg.load_probability``.

    Raises:
        ValueError: a ``q`` outside (0, 1).
    """
    if not mixes:
        return cfg.null_p0
    return max(null_p0(cfg.p0, q, cfg.full_every) for q in set(mixes))


@functools.lru_cache(maxsize=4096)  # a few (n, strikes, p0) recur at every strike
def strike_p_value(n: int, strikes: int, p0: float) -> float:
    """``P(Binomial(n - 1, p0) >= strikes - 1)``: the chance under ``H0`` of the other
    strikes in a window of ``n`` timed verdicts whose newest is a strike (1.0 when
    ``strikes < 2``). Raises ValueError: ``strikes > n`` or ``n < 1``."""
    if n < 1 or not 0 <= strikes <= n:
        raise ValueError("need n >= 1 and 0 <= strikes <= n")
    if strikes < 2:
        return 1.0
    return float(stats.binom.sf(strikes - 2, n - 1, p0))


def capacity_test(
    recent: Sequence[Mapping[str, Any]], look: int, cfg: CapacityTestConfig | None = None,
    round_q: Mapping[str, float] | None = None,
) -> CapacityTest:  # fmt: skip
    """The capacity test at one strike of one node.

    Args:
        recent: the node's verdicts, newest first, each with ``round_id`` and
            ``verdict`` (any verdicts: only timed ones are kept; at least ``window``
            timed ones when the node has them).
        look: the node's late/missing verdicts ever, the newest included.
        cfg: settings (:class:`CapacityTestConfig` defaults if None).
        round_q: the load probability each round ran at, as stored with its schedule
            (:func:`netcheck.analysis.schedule.rule_probability`), by round id; a round
            not in it (or None: every round) ran at ``cfg.load_probability``. The test
            runs at the largest null over the window's mixes (:func:`window_null`).

    Returns:
        the look; not flagged when the newest timed verdict is not a strike, the window
        holds fewer than ``min_strikes`` strikes or ``look < min_strikes``.

    Raises:
        ValueError: ``look`` smaller than the strikes in the window; a ``q`` of the
            window outside (0, 1).
    """
    cfg = cfg or CapacityTestConfig()
    timed = [v for v in recent if str(v["verdict"]) in TIMED][: cfg.window]
    hits = [v for v in timed if str(v["verdict"]) in STRIKES]
    if look < len(hits):
        raise ValueError(f"look {look} < {len(hits)} strikes in the window")
    rounds = tuple(str(v["round_id"]) for v in timed)
    strike_rounds = tuple(str(v["round_id"]) for v in hits)
    stored = round_q or {}
    mixes = round_mixes(rounds, stored, cfg.load_probability)
    null = window_null([q for q, _ in mixes], cfg)
    assumed = tuple(r for r in rounds if r not in stored)
    common = (rounds, strike_rounds, len(timed), len(hits), look)
    at_strike = bool(timed) and str(timed[0]["verdict"]) in STRIKES
    if not at_strike or len(hits) < cfg.min_strikes:
        return CapacityTest(*common, 1.0, 0.0, False, null, mixes, assumed)
    p = strike_p_value(len(timed), len(hits), null)
    level = look_level(look, cfg)
    return CapacityTest(*common, p, level, p <= level, null, mixes, assumed)


def capacity_evidence(
    test: CapacityTest, cfg: CapacityTestConfig, recent: Sequence[Mapping[str, Any]],
    deadline_params: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """Evidence of a ``capacity`` flag: the rule in words, the test's settings and
    numbers, the round mixes of its window, the window's verdicts (newest first) and
    the latencies and receipts of its rounds (``rows``: the node's ``results`` rows of
    those rounds).

    To re-check: count the strikes among the window's verdicts, take
    ``P(Binomial(n - 1, p0) >= strikes - 1)`` and compare it with
    ``alpha * 6 / (pi^2 (look - min_strikes + 1)^2)``; ``p0`` is the largest ``p0`` of
    ``mixes`` (each: a load probability, the window's rounds run at it, and
    :func:`null_p0` of ``p0_at_half`` at it and ``full_every``); each round's ``q`` is
    the one its stored schedule rule carries, the configured one for the rounds in
    ``q_from_config``."""
    window = set(test.rounds)
    # p0: the rate tested (test.null_p0); when it is not the configured rate, the
    # configured rate (stated at the reference mix: 1/2, every 4th round full; the
    # key's name is from session 9) and the configured mix are kept too
    basis = ({} if test.null_p0 == cfg.p0 else
             {"p0_at_half": cfg.p0, "load_probability": cfg.load_probability,
              "full_every": cfg.full_every})  # fmt: skip
    mixes = [{"load_probability": q, "full_every": cfg.full_every, "rounds": k,
              "p0": null_p0(cfg.p0, q, cfg.full_every)} for q, k in test.mixes]  # fmt: skip
    return {
        "rule": rules.capacity_test(cfg.window, test.null_p0, cfg.alpha, cfg.min_strikes),
        "window": cfg.window,
        "min_strikes": cfg.min_strikes,
        "p0": test.null_p0,
        **basis,
        "mixes": mixes,
        "q_from_config": list(test.q_from_config),
        "alpha": cfg.alpha,
        "look": test.look,
        "level": test.level,
        "n": test.n,
        "strikes": test.strikes,
        "p_value": test.p_value,
        "rounds": list(test.rounds),
        "strike_rounds": list(test.strike_rounds),
        "verdicts": [dict(v) for v in recent if str(v["round_id"]) in window],
        "deadline_params": dict(deadline_params),
        "latencies": {r["round_id"]: latency(r) for r in rows},
        "receipts": [receipt(r) for r in rows if r.get("signature")],
    }
