"""Confirmation of one suspect group, as a sans-I/O state machine (pure).

The live coordinator (:mod:`netcheck.coordinator.detection`) and the simulation
harness (:mod:`netcheck.lab.sim.live`) both drive :class:`ConfirmationRun`: ask it for the
next block of load sets, run those rounds (live sessions or simulated rows), hand back
one :class:`~netcheck.analysis.confirm.ConfirmationObservation` per round, repeat until
:attr:`ConfirmationRun.done`. So the simulator confirms exactly as the coordinator does.

Design (docs/detection.md "Confirmation"):

1. **Group phase**: blocks of cycles of (whole group, each member alone)
   (:func:`~netcheck.analysis.confirm.plan_confirmation`), judged after each block on all
   data so far (:func:`~netcheck.analysis.confirm.judge_confirmation`), up to
   ``max_cycles`` cycles; looks after ``cycles``, ``2 cycles``, ``4 cycles``... cumulative
   cycles (``ConfirmConfig.look_schedule`` ``"doubling"``; ``"constant"``: after every
   ``cycles``); look j at ``alpha_attempt / phases * w_j``, ``w_j = 1 / looks``
   (``ConfirmConfig.look_spending``; ``"information"``: the share of the phase's cycles
   the look adds), the shares summing to 1 (Bonferroni over looks and phases; a pair
   has one phase, its group test being the pair test).
   It finds the members that slow down when the group is loaded; it does not stop at
   the first look where 2 members pass, but when all members pass, when the passing
   set (2+) is the same at two looks in a row, or after the last look (stopping early
   never raises the error: the level is already split over every look).
2. **Split phase** (unless the group is exactly a pair that passed): the members that
   passed are tested *pair by pair*: blocks of cycles of (each pair alone together,
   each member alone); a pair is confirmed when both of its members slow down with the
   other alone loaded. The phase ends when every member is in a confirmed pair and the
   confirmed pairs form disjoint cliques, or after its last look. Flags are the maximal
   cliques of the confirmed-pair graph, so a
   flag never claims one backend for identities that were not each shown to slow each
   other (two farms in one suspect group give two flags; an honest member gives none).
3. **Effect floor as a hypothesis**: a member passes when its slowdown is
   *significantly above* the floor (one-sided Welch test of ``effect - floor``;
   ``ConfirmConfig.floor_test``), not when its point estimate is.
4. **Error spending across analyses**: the ``attempt``-th confirmation of a group whose
   pairs were tested before gets ``alpha * 6 / (pi^2 attempt^2)`` (a convergent series
   summing to ``alpha``): a cleared group cannot get fresh chances forever.
5. **Evidence accumulates across attempts** (``prior``): the rounds of earlier
   confirmations that tested this group, or a pair of it, are judged together with this
   attempt's rounds. Each attempt is then one more look at a growing sample (a
   group-sequential design), and the union bound over every look of every attempt
   still holds the family-wise error at ``alpha`` (the looks' levels sum to at most
   ``alpha`` whatever the dependence between them). Only **balanced strata** are
   pooled: the group test reads group-phase rounds of runs of exactly this group; a
   pair test reads group-phase rounds of runs of exactly that pair and split-phase
   rounds of runs whose split set held the pair. Each such block has, per cycle, one
   co-loaded and one alone round per member, so a speed change of the host between
   blocks moves both conditions alike. Member-alone rounds of other groups and the
   rounds of the alone stage (:mod:`netcheck.analysis.alone`) are not pooled: alone-only
   rounds from another time would compare a host's speed then with its speed now (an
   honest coupled pair whose host slowed 10% was confirmed in 36 of 50 simulated
   histories that way). Before, each attempt started from nothing and threw its rounds away, so a
   farm whose per-attempt evidence fell short (jittered or noisy timing, a slowdown
   close to the floor) was re-nominated and re-cleared at an ever smaller level.
6. **Futility stop**: from the second look of the group phase on, the run stops (cleared)
   when fewer than ``min_members`` members have a slowdown *estimate* above the floor:
   the group can hardly pass, and honest co-hosted pairs (coupling below the floor)
   stop after two looks instead of running to ``max_cycles``. Stopping without a
   rejection never raises the error; with pooling (5) the rounds are not lost: a group
   nominated again resumes from them.

``legacy=True`` reproduces the previous behaviour for baselines (stop at the first look
with 2+ passing members, the whole passing set as one flag, no split, no spending).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from netcheck.analysis.confirm import (
    SHARED_BACKEND,
    ConfirmationObservation,
    ConfirmationResult,
    ConfirmConfig,
    judge_confirmation,
    plan_confirmation,
)
from netcheck.analysis.detectors import maximal_cliques


def spending_weight(attempt: int) -> float:
    """Share of ``alpha`` for the ``attempt``-th (1-based) confirmation of a group:
    ``6 / (pi^2 attempt^2)``; the shares of all attempts sum to 1.

    Raises:
        ValueError: ``attempt < 1``.
    """
    if attempt < 1:
        raise ValueError("attempt must be >= 1")
    return 6.0 / (math.pi**2 * attempt * attempt)


def prior_attempts(members: Sequence[str], tested: Sequence[Sequence[str]]) -> int:
    """How many earlier confirmations (each a member list in ``tested``) tested a pair
    of ``members``: the number of them sharing 2+ members with this group."""
    want = set(members)
    return sum(1 for group in tested if len(want & set(group)) >= 2)


def stored_runs(contexts: Iterable[object]) -> list[tuple[str, ...]]:
    """The groups (sorted member tuples) of the distinct confirmation runs that stored
    rounds with ``contexts`` (the JSON contexts of a profile's stored confirmation
    rounds, oldest first), one per run, to be counted by :func:`prior_attempts`.

    Why: a run stores its flags or ``cleared`` record only when it ends; one interrupted
    before (the coordinator stopped mid-run, a run stopped before its first look, a
    storage error ending the batch) leaves only its rounds, each stored before the
    analysis goes on. Without them, the next run of that group would reuse the same
    attempt number: a fresh full level each time a run is cut short.

    Shapes: a shared round (:func:`~netcheck.analysis.confirm_batch.round_context`),
    ``{"batch": id, "runs": [{"group": [...], "attempt": n, ...}, ...]}``: one run per
    distinct (batch, group, attempt) (``attempt`` is absent from contexts stored before
    it was recorded; the batch id alone repeats when two analyses end at the same
    screening round). An older single-run round, ``{"group": [...], "phase", "look",
    ...}`` (groups confirmed one at a time, ``look`` counting a run's blocks from 0): a
    new run starts where the previous round was not such a round of the same group, or
    had a higher look. Anything else (not a mapping, no ``group`` list of 2+ keys, the
    alone stage's ``{"slowness": ...}``) names no run and is skipped.
    """
    seen: dict[tuple[object, ...], tuple[str, ...]] = {}
    last: tuple[tuple[str, ...], int | None] | None = None  # older format: group, look
    for n, context in enumerate(contexts):
        old, last = last, None
        if not isinstance(context, Mapping):
            continue
        runs = context.get("runs")
        if isinstance(runs, list):
            batch = context.get("batch") if isinstance(context.get("batch"), str) else None
            for entry in runs:
                if isinstance(entry, Mapping) and (group := _group(entry.get("group"))):
                    attempt = entry.get("attempt")
                    key = (batch, group, attempt if isinstance(attempt, int) else None)
                    seen.setdefault(key, group)
            continue
        group = _group(context.get("group"))
        if group is None:
            continue
        look = context.get("look")
        last = (group, look if isinstance(look, int) else None)
        if not (old and old[0] == group and _same_run_looks(old[1], last[1])):
            seen[("older", n)] = group
    return list(seen.values())


def _same_run_looks(before: int | None, look: int | None) -> bool:
    """Whether an older-format round with ``look`` can follow one with ``before`` in the
    same run: looks never drop within a run (no look recorded: only after none)."""
    if before is None or look is None:
        return before is None and look is None
    return before <= look


def _group(value: object) -> tuple[str, ...] | None:
    """A stored run's ``group`` as a sorted tuple of 2+ distinct keys, or None."""
    if not isinstance(value, list):
        return None
    group = tuple(sorted({str(k) for k in value}))
    return group if len(group) >= 2 else None


def next_attempt(
    members: Sequence[str], flagged: Sequence[Sequence[str]], runs: Sequence[Sequence[str]]
) -> int:
    """The ``attempt`` of the next confirmation of ``members``: 1 + the larger of the
    :func:`prior_attempts` on ``flagged`` (node sets of the stored flags and ``cleared``
    records) and on ``runs`` (the groups of the runs that stored rounds,
    :func:`stored_runs`); the larger, not the sum, since a run that ended has both.
    Count before the run stores a round, so that it is not counted against itself."""
    return max(prior_attempts(members, flagged), prior_attempts(members, runs)) + 1


def key_cliques(nodes: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[tuple[str, ...]]:
    """:func:`~netcheck.analysis.detectors.maximal_cliques` on node keys."""
    index = {k: i for i, k in enumerate(nodes)}
    edges = [(index[a], index[b]) for a, b in pairs]
    return [tuple(nodes[i] for i in c) for c in maximal_cliques(list(range(len(nodes))), edges)]


@dataclass
class ConfirmationRun:
    """One group's confirmation (module docstring). Drive it with :meth:`next_block`
    and :meth:`add` until :attr:`done`; then read :attr:`flags`.

    Args:
        members: the suspect group (2+ distinct keys).
        cycles: cycles of the first block, of every block with constant looks (the
            coordinator's ``confirm_cycles``).
        max_cycles: cycles per phase at most (``confirm_max_cycles``).
        cfg: thresholds; ``cfg.alpha`` is the level of one attempt before spending.
        attempt: 1-based count of confirmations of this group's pairs, this one included.
        legacy: the previous behaviour (module docstring), for baselines.
        prior: observations of earlier confirmation rounds (any groups, oldest first,
            stamped with ``phase`` and ``tested``); those of balanced strata within
            ``members`` are judged with this attempt's (module docstring, point 5);
            ignored when ``legacy``.

    Raises:
        ValueError: fewer than 2 members, ``cycles < 1`` or ``max_cycles < cycles``.
    """

    members: tuple[str, ...]
    cycles: int = 4
    max_cycles: int = 16
    cfg: ConfirmConfig = field(default_factory=ConfirmConfig)
    attempt: int = 1
    legacy: bool = False
    prior: tuple[ConfirmationObservation, ...] = ()
    observations: list[ConfirmationObservation] = field(default_factory=list)
    group_result: ConfirmationResult | None = None
    pair_results: dict[tuple[str, str], ConfirmationResult] = field(default_factory=dict)
    flags: list[tuple[str, ...]] = field(default_factory=list)
    done: bool = False
    phase: str = "group"
    _looks_done: int = 0
    _last_passed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.members = tuple(dict.fromkeys(self.members))
        if len(self.members) < 2 or self.cycles < 1 or self.max_cycles < self.cycles:
            raise ValueError("need 2+ members, cycles >= 1 and max_cycles >= cycles")
        whole = frozenset(self.members)
        self.prior = () if self.legacy else tuple(
            o for o in self.prior
            if o.loaded and o.loaded <= whole and len(o.tested) >= 2 and o.tested <= whole
            and o.phase in ("group", "split")
        )  # fmt: skip

    @property
    def judged(self) -> list[ConfirmationObservation]:
        """Every observation kept: :attr:`prior` (earlier runs' rounds of balanced strata
        within this group), then this attempt's rounds."""
        return [*self.prior, *self.observations]

    @property
    def tested(self) -> frozenset[str]:
        """The set the current phase tests: the members (group phase) or the members
        that passed it (split phase)."""
        if self.phase == "group":
            return frozenset(self.members)
        return frozenset(self._split_members())

    def _group_strata(self) -> list[ConfirmationObservation]:
        whole = frozenset(self.members)
        return [o for o in self.judged if o.phase == "group" and o.tested == whole]

    def _pair_strata(self, pair: frozenset[str]) -> list[ConfirmationObservation]:
        return [o for o in self.judged
                if (o.phase == "group" and o.tested == pair)
                or (o.phase == "split" and pair <= o.tested)]  # fmt: skip

    @property
    def doubling(self) -> bool:
        """Looks at doubling cumulative cycles (``ConfirmConfig.look_schedule``)."""
        return not self.legacy and self.cfg.look_schedule == "doubling"

    @property
    def looks(self) -> int:
        """Looks per phase: ``ceil(max_cycles / cycles)`` (constant blocks), or with
        doubling the looks at ``cycles * 2**j`` cumulative cycles up to ``max_cycles``:
        ``1 + ceil(log2(max_cycles / cycles))``."""
        if self.doubling:
            looks, cum = 1, self.cycles
            while cum < self.max_cycles:
                looks, cum = looks + 1, cum * 2
            return looks
        return max(1, -(-self.max_cycles // self.cycles))

    def _cumulative(self, looks_done: int) -> int:
        """Cycles of the current phase after ``looks_done`` looks."""
        if looks_done <= 0:
            return 0
        if self.doubling:
            return min(self.cycles * 2 ** (looks_done - 1), self.max_cycles)
        return min(self.cycles * looks_done, self.max_cycles)

    def block_cycles(self) -> int:
        """Cycles of the next block: ``cycles``, or with doubling as many as the
        phase has had so far (the cumulative count doubles), capped at ``max_cycles``."""
        if not self.doubling:
            return self.cycles
        return max(1, self._cumulative(self._looks_done + 1) - self._cumulative(self._looks_done))

    @property
    def alpha(self) -> float:
        """This attempt's level (before the split over looks and phases)."""
        if self.legacy:
            return self.cfg.alpha
        return self.cfg.alpha * spending_weight(self.attempt)

    @property
    def phases(self) -> int:
        """Phases the level is split over: 1 for a pair (its group test is the pair test,
        it has no split phase); for 3+ members ``cfg.group_phases`` (1: the group phase
        only selects, the split phase's pair tests raise the flags, on rounds the
        selection did not read)."""
        return self.cfg.pair_phases if len(self.members) == 2 else self.cfg.group_phases

    def look_share(self, look: int) -> float:
        """The share of a phase's level spent at its ``look``-th look (1-based):
        ``1 / looks`` (``look_spending = "equal"``), or the share of the phase's cycles
        the look adds, ``(c_j - c_{j-1}) / c_L`` (``"information"``); the shares of the
        looks 1..``looks`` sum to 1.

        Raises:
            ValueError: ``look`` outside 1..``looks``.
        """
        if not 1 <= look <= self.looks:
            raise ValueError(f"look {look} outside 1..{self.looks}")
        if self.cfg.look_spending == "equal":
            return 1.0 / self.looks
        total = self._cumulative(self.looks)
        return (self._cumulative(look) - self._cumulative(look - 1)) / total

    def judge_config(self) -> ConfirmConfig:
        """Thresholds of the current look of the current phase (``alpha / phases *``
        :meth:`look_share`; the look being judged, or the next one before any)."""
        if self.legacy:
            return replace(self.cfg, alpha=self.alpha / self.looks, floor_test=False)
        look = min(max(self._looks_done, 1), self.looks)
        return replace(self.cfg, alpha=self.alpha / self.phases * self.look_share(look))

    @property
    def verdict(self) -> str:
        """``shared-backend`` if any flag was raised, else ``cleared``."""
        return SHARED_BACKEND if self.flags else "cleared"

    def next_block(self) -> list[set[str]]:
        """The load sets of the next block of rounds (empty when :attr:`done`)."""
        if self.done:
            return []
        if self.phase == "group":
            return plan_confirmation(self.members, self.block_cycles())
        split = self._split_members()
        plan: list[set[str]] = []
        for _ in range(self.block_cycles()):
            plan.extend({a, b} for a, b in itertools.combinations(split, 2))
            plan.extend({m} for m in split)
        return plan

    def _split_members(self) -> tuple[str, ...]:
        assert self.group_result is not None
        return self.group_result.confirmed_members

    def add(self, block: Sequence[ConfirmationObservation]) -> None:
        """Add the observations of the block just run (one per round) and judge."""
        if self.done:
            raise ValueError("confirmation already done")
        self._looks_done += 1
        tested = self.tested
        self.observations.extend(replace(o, phase=self.phase, tested=tested) for o in block)
        if self.phase == "group":
            self._judge_group()
        else:
            self._judge_split()

    def _judge_group(self) -> None:
        obs = self.observations if self.legacy else self._group_strata()
        res = judge_confirmation(self.members, obs, self.judge_config())
        self.group_result = res
        last = self._looks_done >= self.looks
        if self.legacy:
            if res.verdict == SHARED_BACKEND:
                self.flags = [res.confirmed_members]
            self.done = res.verdict == SHARED_BACKEND or last
            return
        all_passed = len(res.confirmed_members) == len(self.members)
        settled = res.confirmed_members == self._last_passed and len(self._last_passed) >= 2
        above = sum(1 for t in res.members if t.effect > res.effect_floor)
        futile = self.cfg.futility_stop and self._looks_done >= 2 and above < self.cfg.min_members
        if futile:  # fewer than 2 members even estimated above the floor: stop (point 6)
            self.done = True
            return
        self._last_passed = res.confirmed_members
        if not (all_passed or settled or last):
            return
        passed = res.confirmed_members
        if len(passed) < 2:
            self.done = True
        elif len(self.members) == 2:  # the group test was the pair test
            self.flags = [passed]
            self.done = True
        else:
            self.phase = "split"
            self._looks_done = 0

    def close(self) -> None:
        """End the run at its last judged look, before :attr:`done` (any stop of
        :meth:`~netcheck.analysis.confirm_batch.ConfirmationBatch.stop`: the confirmation
        budget, :mod:`netcheck.analysis.confirm_budget`, a member leaving, no node
        connected): in the split phase the
        maximal cliques of the pairs confirmed at that look become its :attr:`flags`, as
        they would at the phase's last look (each pair was rejected at the level that
        look spent, so the bound over looks and attempts holds); in the group phase no
        flag (a pair that passed would be done already; a larger group's phase only
        selects). The looks not taken are not spent. No effect when done or not yet
        judged."""
        if self.done or self.group_result is None:
            return
        if self.phase == "split" and self.pair_results:
            split = self._split_members()
            confirmed = [
                p for p, res in self.pair_results.items() if len(res.confirmed_members) == 2
            ]
            self.flags = key_cliques(split, confirmed)
        self.done = True

    def _judge_split(self) -> None:
        split = self._split_members()
        pairs = list(itertools.combinations(split, 2))
        cfg = replace(self.judge_config(), alpha=self.judge_config().alpha / max(len(pairs), 1))
        confirmed: list[tuple[str, str]] = []
        for a, b in pairs:
            allowed = ({a, b}, {a}, {b})
            obs = [o for o in self._pair_strata(frozenset((a, b))) if set(o.loaded) in allowed]
            res = judge_confirmation((a, b), obs, cfg)
            self.pair_results[(a, b)] = res
            if len(res.confirmed_members) == 2:
                confirmed.append((a, b))
        cliques = key_cliques(split, confirmed)
        covered = {m for c in cliques for m in c}
        disjoint = sum(len(c) for c in cliques) == len(covered)
        if (covered == set(split) and disjoint) or self._looks_done >= self.looks:
            self.flags = cliques
            self.done = True
