"""A confirmation budget per analysis, longest-waiting then strongest nominations first
(pure planner).

docs/detection.md "Confirmation". Screening nominates suspect groups at a loose level
(``DetectorConfig.mutual_fdr``) and every nomination used to be confirmed at once, so
the confirmation rounds of one analysis (which stop screening meanwhile) had no bound:
902-18,686 by 32 screening rounds in session 8's populations, and an operator whose own
identities slow each other exactly at the floor could inflate them (review5). With a
budget of ``B`` rounds (the coordinator's ``confirm_budget_rounds``) the coordinator
(:mod:`netcheck.coordinator.confirm_batches`) and the simulator
(:mod:`netcheck.lab.sim.live`) both:

1. order the suspect groups by the analyses they have waited (:func:`group_wait`, see
   "Why aging" below), longest first, then by :func:`group_strength`, strongest first,
   ties in the detector's order (:func:`confirmation_order`); the batch admits them in
   that order (:func:`~netcheck.analysis.confirm_batch.admit`); after the analysis
   :func:`next_waits` counts one more wait for the pairs left unserved (and keeps the
   count of those set aside for a short canary pool or a halt);
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

**Why aging** (review brk10, "budget starvation"). The margin is screening evidence a
farm shapes for its own identities. Decoy groups that slow each other strongly in
screening (large margins) but exactly at the floor in confirmation rounds (which a farm
with 3+ identities recognises: only group members are loaded), all sharing a hub
identity or loosely linked to the real pair (so :func:`admit` never starts the real
pair beside a running decoy), spend every analysis's budget: by margin alone the real
pair is unserved in every analysis (16 decoy pairs, 10 of 10 analyses), and an
unserved group spends no attempt, so nothing ever accrues. Ordering first by the
analyses waited serves the real pair once the groups that waited as long or longer are
served: within about (decoy groups kept nominated) / (groups served per analysis)
analyses, a bound the farm pays for in identities, not never (review brk10's attack
through this planner, 4 seeds, 8 analyses: a hub with 16 decoy spokes, or 16 linked
decoy pairs, or two linked decoy groups of 15: served and confirmed in analysis 2,
never by the margin alone; hub + 32: analysis 3-4; hub + 64: analysis 6;
tests/analysis/test_confirm_aging.py). With nothing waited
(every first analysis, and every analysis whose budget served all) the order is the
margin order as before.

**Matching a waiting group across analyses: by pair.** The state is a count per node
pair (:data:`PairWaits`): after each analysis every pair of a group left unserved by
the budget counts one more analysis, unless some group holding that pair was dealt
with otherwise (started, already flagged, a member not connected); every other pair
drops out (served, or no longer nominated: the count is of *consecutive* analyses). A
group waits as long as its longest-waiting pair (:func:`group_wait`). Group membership
moves between analyses (a member added or lost with an edge, two cliques merged or
split); matching by the exact member set would reset the wait whenever the detector
(or a farm adding a decoy edge to its real pair's group) changes the set, while a pair
keeps its count through any regrouping that still nominates it. The price: a decoy
added to a waiting group rides on its wait; that group is then served, real pair
included (its split phase tests each pair).

The counts live in memory only (the coordinator's
:class:`~netcheck.coordinator.detection.Screening`, per profile; the simulator's
state): a coordinator restart resets the priorities to the margin order. That loses
no evidence and spends no attempt (those come from stored records); it only restarts
the aging.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping, Sequence

from netcheck.analysis.detector_config import Edge, SuspectGroup

#: ``GroupOutcome.reason`` / the stop reason of work left for the next analysis.
BUDGET_SPENT = "confirmation budget spent"

#: Consecutive analyses a node pair (a two-key frozenset) has waited unserved in a
#: nominated group (module docstring "Matching"); a pair absent has waited none.
PairWaits = Mapping[frozenset[str], int]


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


def group_pairs(members: Sequence[str]) -> set[frozenset[str]]:
    """The node pairs of a group's ``members`` (two-key frozensets)."""
    return {frozenset(p) for p in itertools.combinations(sorted(set(members)), 2)}


def group_wait(members: Sequence[str], waits: PairWaits) -> int:
    """Analyses the group has waited: the largest count among its pairs (0 if none
    waited)."""
    return max((waits.get(p, 0) for p in group_pairs(members)), default=0)


def confirmation_order(groups: Sequence[SuspectGroup], waits: PairWaits | None = None) -> list[int]:
    """Indices of ``groups`` by :func:`group_wait` in ``waits`` (None or empty:
    nothing waited), longest first, then by :func:`group_strength`, strongest first;
    equal keys keep the detector's order (a stable sort). With nothing waited this is
    the margin order alone."""
    waited = [group_wait(g.members, waits) if waits else 0 for g in groups]
    strength = [group_strength(g) for g in groups]
    return sorted(range(len(groups)), key=lambda i: (-waited[i], -strength[i]))


def next_waits(
    groups: Sequence[Sequence[str]], unserved: Collection[int], waits: PairWaits,
    kept: Collection[int] = (),
) -> dict[frozenset[str], int]:  # fmt: skip
    """The wait counts after an analysis that nominated ``groups`` (member sequences)
    and left the indices ``unserved`` unserved by the budget: each pair of an unserved
    group waited one more analysis than in ``waits``, unless a group outside
    ``unserved`` and ``kept`` holds it too (it was served, or set aside otherwise); the
    pairs of the ``kept`` groups (not judged for a cause that is not theirs nor the
    budget's: the canary pool could not cover them, a shutdown or a cancel stopped
    them) keep their count as it was (neither one more: the budget did not pass them
    over; nor dropped: they were not served), unless a served group holds them or an
    unserved one counts them one more; every other pair is dropped (module docstring
    "Matching")."""
    left, keep = set(unserved), set(kept) - set(unserved)
    dealt = set().union(
        *(group_pairs(g) for i, g in enumerate(groups) if i not in left and i not in keep)
    )
    out: dict[frozenset[str], int] = {}
    for i in sorted(left):
        for p in group_pairs(groups[i]) - dealt:
            out[p] = waits.get(p, 0) + 1
    for i in sorted(keep):
        for p in group_pairs(groups[i]) - dealt:
            if p not in out and waits.get(p, 0):
                out[p] = waits[p]
    return out


def first_block_rounds(size: int, cycles: int) -> int:
    """Rounds of a group's first block: ``cycles`` cycles of the whole group and each
    of its ``size`` members alone, ``cycles * (size + 1)`` (a pair at 8 cycles: 24)."""
    return cycles * (size + 1)


def fits(rounds: int, remaining: int | None) -> bool:
    """Whether ``rounds`` more rounds fit in the ``remaining`` budget (None: no
    budget)."""
    return remaining is None or rounds <= remaining
