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
co-hosted neighbour is loaded too (benign coupling: the deadline is calibrated on cards
alone, with room for ``DeadlineParams.coupling`` since session 13, which a noisy card
still crosses more often when coupled), and the share of its timed rounds in which that neighbour is loaded grows with
the share of full rounds and with ``q`` above ``1 / (1 + sqrt(F))`` (1/3 at ``F = 4``;
below, full rounds dominate the node's timed rounds and it grows again as ``q`` falls) (:func:`coupled_share`: 0.70 at 1/2, 0.78 at
2/3, every 4th round full; 0.61 / 0.73 every 8th, 0.83 at 1/2 every 2nd). The test runs
at ``null_p0 = p0 * max(1, coupled_share(q, F) / coupled_share(1/2, 4))``, ``F`` the
deployment's ``screening_full_every``: every node whose late rate under the reference
mix is at most ``p0``, and whose rounds with the neighbour loaded are at least as late
as those without, is late in at most ``null_p0`` of its rounds at ``(q, F)`` (the
bound is reached by a node late only when coupled), so the lifetime bound ``alpha``
holds for the same nodes at every mix. At ``q = 1/2`` with ``F = 4`` it is ``p0``
exactly. **The window's own share** (session 12): the test does not take the share
from the configured ``(q, F)`` but from the rounds in the window (:func:`window_share`):
each round has a *round share*, the chance that a given other node was loaded too
(:func:`round_share` of its stored kind and rule: ``q`` for a screening round whose
stored rule carries ``q``, 1 for a full round and, conservatively, for a group
confirmation round, 0 for an alone round, a confirmation round that loaded the node
alone; a round without a stored rule takes the configured mix's expected share
``coupled_share(q, F)``, the behaviour before), and the test runs at
``p0 * max(1, s_window / coupled_share(1/2, 4))`` (:func:`share_null`), ``s_window``
the mean round share of the window's rounds but the newest (the look's own strike).
A node late with probability ``a`` alone and ``b >= a`` coupled is late in round ``r``
with probability ``a + c_r (b - a)``, whose mean over the rounds is ``a + s_window (b -
a)``, at most that null; the strike count is a sum of independent Bernoullis with
these differing rates, and the binomial tail at the mean rate bounds its upper tail
beyond the mean (Hoeffding 1956, Theorem 4; :func:`capacity_test`). So neither the
round mix nor the cadence ``F`` has to be the configured one: after an operator
raises ``F`` (every 4th round full -> every 8th) or changes ``q``, the old rounds
still count at the share they ran at until they leave the window (session 11 judged
``q`` per round but every round at the configured ``F``: 3.33% -> 3.11% at 2/3 from
every 4th to every 8th until the old rounds left; before session 11 the configured
mix alone), and full and confirmation rounds count at 1 instead of the configured
mix. With one ``q``, every 4th round full and a steady window the test differs from
the one at the configured mix only by the window's actual share against its
expectation (a node timed in 16 full rounds of 47 at 2/3 instead of the expected
15.7: 0.780 against 0.778); without stored rules it is that test bit for bit.
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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from netcheck.analysis import rules
from netcheck.analysis.evidence import latency, receipt
from netcheck.analysis.schedule import rule_probability
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

    @property
    def share(self) -> float:
        """The expected coupled share of the configured mix: :func:`coupled_share` at
        ``load_probability`` and ``full_every`` (what a round without a stored rule
        is taken at)."""
        return coupled_share(self.load_probability, self.full_every)


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
    return share_null(p0, coupled_share(q, full_every))


def share_null(p0: float, share: float) -> float:
    """The capacity test's null late rate for rounds whose coupled share (the mean
    chance that a given other node is loaded too) is ``share``, for ``p0`` stated at
    the reference mix: ``p0 * max(1, share / coupled_share(1/2, 4))``, at most
    1 - 1e-9 (:func:`null_p0` is this at ``coupled_share(q, F)``; the same argument:
    a node late with probability ``a`` alone and ``b >= a`` coupled, ``a + s_ref (b -
    a) <= p0``, is late in at most that share of rounds at ``share``)."""
    ratio = share / coupled_share(REFERENCE_Q, REFERENCE_FULL_EVERY)
    return p0 if ratio <= 1.0 else min(p0 * ratio, 1.0 - 1e-9)


def round_share(kind: str, rule: str, sent: int | None = None) -> float:
    """The round share of a stored round (kind, schedule rule and, where read, ``sent``:
    the nodes it sent work to, i.e. its ``results`` rows): the chance that a given
    other node (a possible honest co-host) was loaded too, for a node timed in it.

    - a ``screening`` round whose rule carries ``q``
      (:func:`~netcheck.analysis.schedule.rule_probability`): ``q`` (each node's coin is
      independent of the others');
    - a ``confirmation`` round that sent work to one node only (``sent == 1``: an
      *alone round*, the node's own; every node a round loads gets a ``results`` row,
      :meth:`~netcheck.storage.flags.FlagStore.alone_results`): 0, no other node was
      loaded;
    - every other round: 1, the most it can be. Exact for a full round (``all``: every
      node loaded); conservative for a group confirmation round (``explicit``, or
      ``explicit+`` with coins): it loads a planned group, and an honest node's co-host
      is the likeliest member of its group (the pair the analysis linked), so neither
      ``q`` nor the configured mix bounds it; and for a screening round whose rule
      carries no ``q`` (unknown, malformed).
    """
    q = rule_probability(rule) if kind == "screening" else None
    if q is not None:
        return q
    return 0.0 if kind == "confirmation" and sent == 1 else 1.0


def window_share(
    rounds: Sequence[str], shares: Mapping[str, float] | None, cfg: CapacityTestConfig
) -> tuple[float, tuple[tuple[float, int], ...], tuple[str, ...]]:
    """The coupled share of the rounds ``rounds``: the mean of their round shares
    (``shares[r]``, :func:`round_share`; a round not in ``shares``, or every round when
    it is None, takes :attr:`CapacityTestConfig.share`, the expected share of the
    configured mix, as before session 12), with the rounds per share (ascending) and
    the rounds without a stored share. ``cfg.share`` for no rounds; exactly the one
    share when all are equal (so a window without stored shares gives
    ``cfg.null_p0`` bit for bit).

    Raises:
        ValueError: a share outside [0, 1].
    """
    stored = shares or {}
    values = [stored.get(r, cfg.share) for r in rounds]
    if any(not 0.0 <= v <= 1.0 for v in values):
        raise ValueError("round shares must be in [0, 1]")
    counts = Counter(values)
    if not values:
        mean = cfg.share
    elif len(counts) == 1:
        mean = values[0]
    else:
        mean = math.fsum(values) / len(values)
    return mean, tuple(sorted(counts.items())), tuple(r for r in rounds if r not in stored)


@dataclass(frozen=True)
class CapacityTest:
    """One look of :func:`capacity_test` at one node.

    ``rounds``/``strike_rounds``: round ids of the window and of its strikes, newest
    first; ``n``/``strikes``: their counts; ``look``: the node's strikes ever (this
    one included); ``p_value``; ``level``: the look's level (0 when no test ran);
    ``flagged``: ``p_value <= level``; ``null_p0``: the late rate tested
    (:func:`share_null`); ``share``: the coupled share it was taken at, the mean of the
    round shares of the window's rounds but the newest (:func:`window_share`);
    ``shares``: ``(round share, rounds)`` of those rounds, ascending;
    ``share_from_config``: those of them without a stored round share (given
    :attr:`CapacityTestConfig.share`), newest first; ``largest_rate``: the test's
    bound on the late rate of the window's likeliest round (:func:`share_null` at the
    largest round share), used instead of ``null_p0`` where Hoeffding's bound does not
    reach (:func:`capacity_test`).
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
    share: float
    shares: tuple[tuple[float, int], ...]
    share_from_config: tuple[str, ...]
    largest_rate: float


def look_level(look: int, cfg: CapacityTestConfig) -> float:
    """The level of the look at a node's ``look``-th strike ever:
    ``alpha * 6 / (pi^2 j^2)``, ``j = look - min_strikes + 1``; 0 before
    ``min_strikes`` strikes. Summed over all looks: ``alpha``."""
    j = look - cfg.min_strikes + 1
    return cfg.alpha * 6.0 / (math.pi**2 * j * j) if j >= 1 else 0.0


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
    shares: Mapping[str, float] | None = None,
) -> CapacityTest:  # fmt: skip
    """The capacity test at one strike of one node.

    Args:
        recent: the node's verdicts, newest first, each with ``round_id`` and
            ``verdict`` (any verdicts: only timed ones are kept; at least ``window``
            timed ones when the node has them).
        look: the node's late/missing verdicts ever, the newest included.
        cfg: settings (:class:`CapacityTestConfig` defaults if None).
        shares: each round's round share (:func:`round_share` of its stored kind and
            rule), by round id; a round not in it (or None: every round) takes
            :attr:`CapacityTestConfig.share`, the configured mix's expected share.

    The null is :func:`share_null` at the mean round share of the window's rounds but
    the newest (the look's own strike, which is not evidence: the p-value counts the
    other ``n - 1``), :func:`window_share`. Under ``H0`` their strikes are independent
    with rates ``pi_r <= a + c_r (b - a)`` (``c_r`` the round share, ``a``/``b`` the
    node's late probabilities without/with its co-host loaded), whose mean is at most
    that null: the count is Poisson-binomial, and Hoeffding (1956, "On the distribution
    of the number of successes in independent trials", Ann. Math. Statist. 27,
    713-721, Theorem 4) bounds its upper tail by the binomial tail at the mean rate,
    ``P(S >= k) <= P(Binomial(m, mean) >= k)`` for ``k >= m * mean + 1``: the p-value
    ``P(Binomial(n - 1, null) >= x - 1)`` is valid there. Below that point (``x - 1 <
    (n - 1) null + 1``; where ``x - 1 >= 2`` that tail exceeds 1/4 and no look rejects
    at ``alpha <= 0.41``, but with ``min_strikes`` 2 a single other strike would be
    anti-conservative, ``1 - prod(1 - pi_r)`` exceeding ``1 - (1 - mean)^m``) the
    p-value is taken at the largest round's rate instead (``largest_rate``: the
    binomial at the largest rate dominates), so the test is valid at every look. With
    one round share throughout (no stored shares, or all equal) both are
    ``cfg.null_p0``-like and equal: the test before session 12 bit for bit.

    Returns:
        the look; not flagged when the newest timed verdict is not a strike, the window
        holds fewer than ``min_strikes`` strikes or ``look < min_strikes``.

    Raises:
        ValueError: ``look`` smaller than the strikes in the window; a share of the
            window outside [0, 1].
    """
    cfg = cfg or CapacityTestConfig()
    timed = [v for v in recent if str(v["verdict"]) in TIMED][: cfg.window]
    hits = [v for v in timed if str(v["verdict"]) in STRIKES]
    if look < len(hits):
        raise ValueError(f"look {look} < {len(hits)} strikes in the window")
    rounds = tuple(str(v["round_id"]) for v in timed)
    strike_rounds = tuple(str(v["round_id"]) for v in hits)
    share, counts, assumed = window_share(rounds[1:], shares, cfg)
    null = share_null(cfg.p0, share)
    largest = share_null(cfg.p0, counts[-1][0]) if counts else null
    common = (rounds, strike_rounds, len(timed), len(hits), look)
    mix = (null, share, counts, assumed, largest)
    at_strike = bool(timed) and str(timed[0]["verdict"]) in STRIKES
    if not at_strike or len(hits) < cfg.min_strikes:
        return CapacityTest(*common, 1.0, 0.0, False, *mix)
    reached = len(hits) - 1 >= (len(timed) - 1) * null + 1  # Hoeffding's Theorem 4
    p = strike_p_value(len(timed), len(hits), null if reached else largest)
    level = look_level(look, cfg)
    return CapacityTest(*common, p, level, p <= level, *mix)


def capacity_evidence(
    test: CapacityTest, cfg: CapacityTestConfig, recent: Sequence[Mapping[str, Any]],
    deadline_params: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """Evidence of a ``capacity`` flag: the rule in words, the test's settings and
    numbers, the round shares of its window, the window's verdicts (newest first) and
    the latencies and receipts of its rounds (``rows``: the node's ``results`` rows of
    those rounds).

    To re-check: count the strikes among the window's verdicts, take
    ``P(Binomial(n - 1, p0) >= strikes - 1)`` and compare it with
    ``alpha * 6 / (pi^2 (look - min_strikes + 1)^2)``. ``p0`` = the configured rate
    (``p0_at_half``, kept when ``p0`` differs from it) ``* max(1, coupled_share /
    reference_share)``; ``coupled_share`` is the mean round share of
    the window's rounds but the newest (``shares``: each round share with its rounds;
    a screening round's share is the ``q`` its stored rule carries, an alone
    confirmation round's 0, any other stored round's 1 (:func:`round_share`), and the
    rounds in ``share_from_config`` took ``configured_share``, the configured mix's). Where ``strikes - 1 < (n - 1) p0 + 1`` the tail is taken at
    ``largest_rate`` instead (:func:`capacity_test`)."""
    window = set(test.rounds)
    # p0: the rate tested (test.null_p0); when it is not the configured rate, the
    # configured rate (stated at the reference mix: 1/2, every 4th round full; the
    # key's name is from session 9) and the configured mix are kept too
    basis = ({} if test.null_p0 == cfg.p0 else
             {"p0_at_half": cfg.p0, "load_probability": cfg.load_probability,
              "full_every": cfg.full_every})  # fmt: skip
    reference = coupled_share(REFERENCE_Q, REFERENCE_FULL_EVERY)
    return {
        "rule": rules.capacity_test(cfg.window, test.null_p0, cfg.alpha, cfg.min_strikes),
        "window": cfg.window,
        "min_strikes": cfg.min_strikes,
        "p0": test.null_p0,
        **basis,
        "coupled_share": test.share,
        "reference_share": reference,
        "configured_share": cfg.share,
        "shares": [{"share": c, "rounds": k} for c, k in test.shares],
        "share_from_config": list(test.share_from_config),
        "largest_rate": test.largest_rate,
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
