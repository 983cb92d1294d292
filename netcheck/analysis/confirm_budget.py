"""A confirmation budget per analysis, strongest nominations first (pure planner).

docs/detection.md "Confirmation". Screening nominates suspect groups at a loose level
(``DetectorConfig.mutual_fdr``) and every nomination used to be confirmed at once, so
the confirmation rounds of one analysis (which stop screening meanwhile) had no bound:
902-18,686 by 32 screening rounds in session 8's populations, and an operator whose own
identities slow each other exactly at the floor could inflate them (review5). With a
budget of ``B`` rounds (the coordinator's ``confirm_budget_rounds``) the coordinator
(:mod:`netcheck.coordinator.confirm_batches`) and the simulator
(:mod:`netcheck.lab.sim.live`) both:

1. order the suspect groups by :func:`group_strength` (:func:`confirmation_order`),
   strongest first, ties in the detector's order; the batch admits them in that order
   (:func:`~netcheck.analysis.confirm_batch.admit`);
2. start a group only when its first block fits in what is left of the budget
   (:func:`first_block_rounds`); one that does not fit is **unserved**: no round, no
   record, so no attempt and no look is spent on it (attempts are counted from the
   stored records and the runs named by stored confirmation rounds,
   :func:`~netcheck.analysis.confirm_run.next_attempt`); screening goes on and the next
   analysis nominates it again;
3. before each shared step, stop every running run whose next block would overrun the
   budget (:meth:`~netcheck.analysis.confirm_batch.ConfirmationBatch.plan`); shared
   rounds cost the longest block of the step, so the other runs go on. A stopped run
   has judged at least its first look (it started only when that block fitted), so it
   is closed at that look like any stopped run (a member left, too): the pairs its
   split phase confirmed there are its flags, else a ``cleared`` record; its attempt
   counted, its rounds pooled for the next attempt. Stopping without a rejection never raises
   the error; the attempt's looks not taken are simply not spent (power, not error).

The rounds of an analysis's contention confirmation therefore never exceed ``B``
(the alone stage of slowness nominees is outside it, :mod:`netcheck.analysis.alone`).

**Why this strength.** The confirmation tests ``H0: slowdown <= floor``, so the
nominations it can confirm are those whose screening evidence stands *above the
floor*, not merely above zero. :func:`edge_margin` is the edge's statistic rescaled to
that hypothesis: ``z * (effect - floor) / effect`` (the standard error ``effect / z``
kept; for a correlation edge in Fisher's ``atanh`` units). Ordering by the plain p (or
z) would serve first the pairs an operator makes slow each other *exactly at the
floor* (a large z, review5: they cost confirmation rounds and can never be
confirmed), and honest co-hosted pairs nominated by a noisy estimate just above the
floor; a real farm's slowdown (about log 1.5 at beta 0.5) is far above it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from netcheck.analysis.detector_config import Edge, SuspectGroup

#: ``GroupOutcome.reason`` / the stop reason of work left for the next analysis.
BUDGET_SPENT = "confirmation budget spent"


def edge_margin(edge: Edge) -> float:
    """How far above its floor the edge's evidence stands, as a z: ``statistic * (e -
    f) / e`` with ``e``, ``f`` the edge's ``effect`` and ``effect_floor`` (for a
    Detector B edge, ``"B"``, their Fisher ``atanh``: its statistic is ``atanh(r)
    sqrt(n - 3)``); ``-inf`` for a non-positive effect or a non-finite statistic."""
    e, f = edge.effect, edge.effect_floor
    if edge.detector == "B":
        e, f = math.atanh(min(e, 0.999999)), math.atanh(min(f, 0.999999))
    if not (e > 0 and math.isfinite(edge.statistic) and math.isfinite(e)):
        return -math.inf
    return edge.statistic * (e - f) / e


def group_strength(group: SuspectGroup) -> float:
    """The strongest :func:`edge_margin` among the group's edges (a group holding one
    real farm pair confirms it in its split phase); ``-inf`` for a group without
    edges."""
    return max((edge_margin(e) for e in group.edges), default=-math.inf)


def confirmation_order(groups: Sequence[SuspectGroup]) -> list[int]:
    """Indices of ``groups`` by :func:`group_strength`, strongest first; equal
    strengths keep the detector's order (a stable sort)."""
    strength = [group_strength(g) for g in groups]
    return sorted(range(len(groups)), key=lambda i: -strength[i])


def first_block_rounds(size: int, cycles: int) -> int:
    """Rounds of a group's first block: ``cycles`` cycles of the whole group and each
    of its ``size`` members alone, ``cycles * (size + 1)`` (a pair at 8 cycles: 24)."""
    return cycles * (size + 1)


def fits(rounds: int, remaining: int | None) -> bool:
    """Whether ``rounds`` more rounds fit in the ``remaining`` budget (None: no
    budget)."""
    return remaining is None or rounds <= remaining
