"""Confirmation rounds and the relay test (pure).

detection.md §2 "Confirmation" and §3. A suspect group from screening is re-tested in a
controlled experiment: rounds that load *only* the group, interleaved with rounds that
load each member alone. A shared backend serving g batches slows each by
``1 + beta * (g - 1)``; honest co-hosted GPUs couple by a few percent. So a member is
confirmed when its co-loaded service time exceeds its alone time by more than an effect
floor, significantly; a group with 2+ confirmed members becomes a ``shared-backend``
flag, otherwise it is cleared (and screened more).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from netcheck.analysis.tails import t_sf
from netcheck.records import FlagKind, FlagStatus

SHARED_BACKEND = FlagKind.SHARED_BACKEND
CLEARED = FlagStatus.CLEARED
RELAY = FlagKind.RELAY


@dataclass(frozen=True)
class ConfirmConfig:
    """Thresholds of the confirmation test, with documented defaults.

    - ``effect_floor`` (log 1.25): minimum co-loaded/alone slowdown of a member, in log
      units (25%); a shared pair with beta = 0.5 shows log 1.5.
    - ``alpha`` (1e-3): one-sided level of each member's Welch test, before Bonferroni
      over the group's members.
    - ``min_rounds`` (3): minimum observations per condition per member.
    - ``min_members`` (2): confirmed members needed to confirm the group.
    - ``floor_test`` (True): the floor is a hypothesis: a member passes when Welch's
      one-sided test of ``H0: effect <= effect_floor`` rejects at the level (the
      slowdown is *significantly above* the floor). False = the previous rule (effect
      estimate above the floor and ``H0: effect <= 0`` rejected), under which a real
      coupling just below the floor (honest co-hosted GPUs) passes about half the time
      once the data make it significant.
    - ``futility_stop`` (True): :class:`~netcheck.analysis.confirm_run.ConfirmationRun`
      stops a group phase, from its second look on, when fewer than ``min_members``
      members have a slowdown estimate above the floor (never raises the error).
    - ``pair_phases`` (1): phases a pair's level is split over: 1, as a pair has no split
      phase (its group test is the pair test); 2 = before session 4.
    - ``group_phases`` (1): phases the level of a group of 3+ is split over. 1: the split
      phase's pair tests get the attempt's whole level, because the group phase raises
      no flag (it only selects the members to test pair by pair, and the split phase
      judges its pairs on rounds the selection did not read: its own split rounds and
      pooled rounds of earlier runs), so its looks need no share of the error
      (adversarial review, session 5). 2: the group phase and the split phase halve it
      (sessions 4-5a).
    - ``member_level`` (``"iut"``): how the group's level is split over its g members.
      ``"iut"``: ``alpha / (g - m + 1)`` with ``m = min_members``. The group is
      confirmed when m members pass. Under the null (fewer than m members slowed above
      the floor) with j <= m - 1 non-null members, a confirmation needs at least
      ``m - j`` of the ``g - j`` null members to pass; by Markov's inequality on their
      count that has probability at most ``(g - j) * level / (m - j)``, largest at
      ``j = m - 1``: ``(g - m + 1) * level = alpha``, whatever the dependence between
      members (they share the co-loaded rounds). For a pair that is ``alpha`` itself:
      both members must pass, the intersection-union test (Berger, *Technometrics* 24
      (1982) 295-300; Berger & Hsu, *Stat. Sci.* 11 (1996) 283-319).
      ``"bonferroni"``: ``alpha / g`` (before session 5).
    - ``look_schedule`` (``"doubling"``): when a
      :class:`~netcheck.analysis.confirm_run.ConfirmationRun` looks. ``"doubling"``:
      after ``cycles``, ``2 cycles``, ``4 cycles``, ... cumulative cycles up to
      ``max_cycles`` (8, 16, 32, 64, 128, 256 with the coordinator's defaults: 6 looks); ``"constant"``: after
      every ``cycles`` (session 4: 8 looks up to 64). The level is split over the looks,
      so doubling buys a larger cap for fewer, stronger looks; the futility stop still
      comes at the second look (16 cycles). Group-sequential designs with looks at
      growing information fractions: Jennison & Turnbull, *Group Sequential Methods*
      (2000), ch. 7.
    - ``look_spending`` (``"equal"``): how the level of one attempt's phase is split
      over its looks. ``"equal"``: ``1 / looks`` each. ``"information"``: look j gets
      the share of the phase's cycles it adds, ``(c_j - c_{j-1}) / c_L`` (c_j =
      cumulative cycles after look j; with doubling looks at 8 ... 256 cycles: 1/32,
      1/32, 1/16, 1/8, 1/4, 1/2), the linear alpha-spending function of Lan & DeMets
      (*Biometrika* 70 (1983) 659-663) spent by Bonferroni instead of the exact joint
      boundary. Either way the shares sum to 1, so the union bound over the looks holds
      the phase at its level whatever the correlation between looks. Measured
      (``benchmarks/confirm_power.py``, session 7): with a cap of 128 cycles
      information spending raises one attempt's power on pairs near the floor (plain
      beta 0.3: 0.79 -> 0.83) but costs easy pairs rounds (plain: +17%); with the cap
      of 256, equal shares reach the same power (0.92 / 0.93) with 6-18% fewer rounds
      on the easier pairs, so ``"equal"`` stays the default.
    """

    effect_floor: float = math.log(1.25)
    alpha: float = 1e-3
    min_rounds: int = 3
    min_members: int = 2
    floor_test: bool = True
    futility_stop: bool = True
    pair_phases: int = 1
    group_phases: int = 1
    member_level: str = "iut"
    look_schedule: str = "doubling"
    look_spending: str = "equal"

    def member_alpha(self, g: int) -> float:
        """Level of each member's test in a group of ``g`` (``member_level``)."""
        if self.member_level == "bonferroni":
            return self.alpha / max(g, 1)
        return self.alpha / max(g - self.min_members + 1, 1)

    def __post_init__(self) -> None:
        if self.member_level not in ("iut", "bonferroni"):
            raise ValueError("member_level must be 'iut' or 'bonferroni'")
        if self.look_schedule not in ("doubling", "constant"):
            raise ValueError("look_schedule must be 'doubling' or 'constant'")
        if self.look_spending not in ("information", "equal"):
            raise ValueError("look_spending must be 'information' or 'equal'")
        if self.effect_floor < 0 or not 0 < self.alpha < 1:
            raise ValueError("need effect_floor >= 0 and 0 < alpha < 1")
        if self.pair_phases not in (1, 2) or self.group_phases not in (1, 2):
            raise ValueError("pair_phases and group_phases must be 1 or 2")
        if self.min_rounds < 2 or self.min_members < 2:
            raise ValueError("need min_rounds >= 2 and min_members >= 2")


@dataclass(frozen=True)
class ConfirmationObservation:
    """One confirmation round: the nodes loaded and their log service times.

    ``log_service``: node -> ``log(t_result - t_release - rtt)`` in log-seconds, with a
    missing result censored at ``log(deadline)`` (as
    :func:`~netcheck.analysis.timing.log_service_matrix` does); NaN entries are ignored.
    ``phase`` (``"group"`` or ``"split"``) and ``tested`` (the set whose group or pairs
    the round's block tested): stamped by :class:`~netcheck.analysis.confirm_run.ConfirmationRun`
    when it takes the round, stored in the round's context; empty = unknown (an
    earlier round so marked is never pooled).
    """

    round_id: str
    loaded: frozenset[str]
    log_service: Mapping[str, float]
    phase: str = ""
    tested: frozenset[str] = frozenset()


@dataclass(frozen=True)
class MemberTest:
    """One member's co-loaded vs alone comparison.

    ``effect``: mean log service time co-loaded minus alone; ``slowdown``: ``exp(effect)``;
    ``t``/``df``/``p``: Welch's test, one-sided; ``confirmed``: cleared floor and level.
    """

    node_key: str
    n_coloaded: int
    n_alone: int
    effect: float
    slowdown: float
    t: float
    df: float
    p: float
    confirmed: bool


@dataclass(frozen=True)
class ConfirmationResult:
    """Outcome for one suspect group.

    ``verdict``: ``"shared-backend"`` or ``"cleared"``; ``confirmed_members``: members
    whose slowdown cleared the floor and the level; ``beta_estimate``: median over
    confirmed members of ``(slowdown - 1) / (g - 1)`` (NaN if none); ``p_threshold``:
    the per-member level (:meth:`ConfirmConfig.member_alpha`); ``effect_floor``: the floor used.
    """

    group: tuple[str, ...]
    verdict: str
    members: tuple[MemberTest, ...]
    confirmed_members: tuple[str, ...]
    beta_estimate: float
    p_threshold: float
    effect_floor: float


def plan_confirmation(group: Sequence[str], n_rounds: int) -> list[set[str]]:
    """Load sets for confirming ``group``: ``n_rounds`` cycles of (group, m1, ..., mg).

    Each cycle is one round loading the whole group followed by one round per member
    loading that member alone, so every member has ``n_rounds`` co-loaded and
    ``n_rounds`` alone observations, interleaved so that slow drifts hit both
    conditions alike. Total ``n_rounds * (g + 1)`` rounds.

    Raises:
        ValueError: if the group has fewer than 2 distinct members or ``n_rounds < 1``.
    """
    members = list(dict.fromkeys(group))
    if len(members) < 2 or n_rounds < 1:
        raise ValueError("need a group of 2+ distinct members and n_rounds >= 1")
    plan: list[set[str]] = []
    for _ in range(n_rounds):
        plan.append(set(members))
        plan.extend({m} for m in members)
    return plan


def _welch(a: np.ndarray, b: np.ndarray, shift: float = 0.0) -> tuple[float, float, float]:
    """Welch (1947) t of ``mean(a) - mean(b) - shift``, its df and one-sided p
    (``H0: difference <= shift``)."""
    va, vb = float(np.var(a, ddof=1)) / a.size, float(np.var(b, ddof=1)) / b.size
    se2 = va + vb
    diff = float(np.mean(a) - np.mean(b)) - shift
    if se2 <= 0:
        t = math.inf if diff > 0 else (-math.inf if diff < 0 else 0.0)
        return t, float(a.size + b.size - 2), 0.0 if diff > 0 else 1.0
    df = se2 * se2 / (va * va / (a.size - 1) + vb * vb / (b.size - 1))
    t = diff / math.sqrt(se2)
    return t, df, float(t_sf(t, df))


def judge_confirmation(
    group: Sequence[str],
    observations: Sequence[ConfirmationObservation],
    cfg: ConfirmConfig | None = None,
) -> ConfirmationResult:
    """Judge confirmation rounds for ``group`` (see the module docstring).

    A round counts as *co-loaded* for member m when it loaded the whole group, as
    *alone* when m is the only group member loaded. Each member gets a one-sided Welch
    t-test (Welch 1947) of co-loaded minus alone mean log service time at level
    :meth:`ConfirmConfig.member_alpha` (``alpha`` for a pair, an intersection-union
    test; ``alpha / (g - 1)`` for larger groups): with ``floor_test`` of ``H0: effect <=
    effect_floor``, else of ``H0: effect <= 0`` plus the estimate above the floor
    (``t``/``p`` in :class:`MemberTest` are those of the test used); the group is
    ``shared-backend`` if at least ``min_members`` members are confirmed.
    """
    cfg = cfg or ConfirmConfig()
    members = tuple(dict.fromkeys(group))
    whole = frozenset(members)
    level = cfg.member_alpha(len(members))
    tests: list[MemberTest] = []
    for m in members:
        co: list[float] = []
        alone: list[float] = []
        for obs in observations:
            value = obs.log_service.get(m, math.nan)
            if not math.isfinite(value):
                continue
            in_group = obs.loaded & whole
            if in_group == whole:
                co.append(value)
            elif in_group == {m}:
                alone.append(value)
        if len(co) < cfg.min_rounds or len(alone) < cfg.min_rounds:
            tests.append(MemberTest(m, len(co), len(alone), math.nan, math.nan,
                                    math.nan, math.nan, math.nan, False))  # fmt: skip
            continue
        a, b = np.asarray(co), np.asarray(alone)
        effect = float(a.mean() - b.mean())
        t, df, p = _welch(a, b, cfg.effect_floor if cfg.floor_test else 0.0)
        ok = p < level and effect > cfg.effect_floor
        tests.append(MemberTest(m, a.size, b.size, effect, math.exp(effect), t, df, p, ok))
    confirmed = tuple(mt.node_key for mt in tests if mt.confirmed)
    verdict = SHARED_BACKEND if len(confirmed) >= cfg.min_members else CLEARED
    betas = [(mt.slowdown - 1) / (len(members) - 1) for mt in tests if mt.confirmed]
    beta = float(np.median(betas)) if betas else math.nan
    return ConfirmationResult(
        members, verdict, tuple(tests), confirmed, beta, level, cfg.effect_floor
    )


@dataclass(frozen=True)
class RelayResult:
    """Relay test outcome.

    ``excess_s``: per-sample excess ``probe - echo - ref_probe`` (seconds);
    ``median_excess_s`` and ``mad_s`` (median absolute deviation, unscaled) of it;
    ``threshold_s = floor_s + mad_k * mad_s``; ``flagged``: ``median_excess_s >
    threshold_s`` with at least ``min_samples`` samples.
    """

    excess_s: tuple[float, ...]
    median_excess_s: float
    mad_s: float
    threshold_s: float
    flagged: bool


def relay_excess(
    probe_rtts_s: Sequence[float],
    echo_rtts_s: Sequence[float],
    ref_probe_s: float,
    floor_s: float = 0.015,
    mad_k: float = 3.0,
    min_samples: int = 5,
) -> RelayResult:
    """Relay test (detection.md §3): a persistent excess of probe RTT over echo RTT.

    A tiny known-answer GPU probe's RTT should equal the application echo RTT plus the
    profile's reference probe time; a relay between the websocket endpoint and the GPU
    adds a network leg. Excess per sample = probe - echo - ``ref_probe_s``, paired
    sample by sample when both sequences have the same length, else against the median
    echo. Flagged when the median excess exceeds ``floor_s + mad_k * MAD`` (robust:
    Hampel 1974, median absolute deviation), over at least ``min_samples`` samples.

    Raises:
        ValueError: on empty inputs or negative ``floor_s``/``mad_k``.
    """
    if not probe_rtts_s or not echo_rtts_s:
        raise ValueError("need probe and echo RTT samples")
    if floor_s < 0 or mad_k < 0:
        raise ValueError("floor_s and mad_k must be >= 0")
    probe = np.asarray(probe_rtts_s, dtype=np.float64)
    echo = np.asarray(echo_rtts_s, dtype=np.float64)
    if echo.size != probe.size:
        echo = np.full_like(probe, float(np.median(echo)))
    excess = probe - echo - ref_probe_s
    med = float(np.median(excess))
    mad = float(np.median(np.abs(excess - med)))
    threshold = floor_s + mad_k * mad
    flagged = excess.size >= min_samples and med > threshold
    return RelayResult(tuple(float(x) for x in excess), med, mad, threshold, flagged)
