"""Longest-waiting groups first within the confirmation budget
(netcheck.analysis.confirm_budget "Why aging"): the wait counts by pair, the order with
and without waits, and the budget starvation attack of review brk10 driven through the
real planner (ConfirmationBatch, admit, budget, attempts, pooled evidence, as
LiveSimulation._confirm)."""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from netcheck.analysis.confirm import ConfirmationObservation, ConfirmConfig
from netcheck.analysis.confirm_batch import ConfirmationBatch, admit
from netcheck.analysis.confirm_budget import (
    confirmation_order,
    first_block_rounds,
    fits,
    group_wait,
    next_waits,
)
from netcheck.analysis.confirm_run import ConfirmationRun, prior_attempts
from netcheck.analysis.detector_config import Edge, SuspectGroup

FLOOR = math.log(1.25)


def _edge(a: str, b: str, z: float, effect: float) -> Edge:
    return Edge(a, b, "A-mutual", z, math.inf, 1e-12, 1e-4, effect, FLOOR, 32)


def _pair(a: str, b: str, z: float, effect: float) -> SuspectGroup:
    return SuspectGroup((a, b), (_edge(a, b, z, effect),))


def _p(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


def test_nothing_waited_keeps_the_margin_order() -> None:
    """No waits (None, empty, or only pairs not nominated now): the margin order, ties
    in detector order, exactly as before aging."""
    groups = [_pair("x", "y", 12.0, FLOOR), SuspectGroup(("u", "v"), ()),
              _pair("a", "b", 6.0, math.log(1.5)), _pair("c", "d", 6.0, math.log(1.5))]  # fmt: skip
    assert confirmation_order(groups) == [2, 3, 0, 1]
    assert confirmation_order(groups, {}) == [2, 3, 0, 1]
    assert confirmation_order(groups, {_p("p", "q"): 5}) == [2, 3, 0, 1]


def test_waited_groups_come_first_longest_first_then_by_margin() -> None:
    """A group waits as long as its longest-waiting pair; longer waits first, equal
    waits by margin, then detector order."""
    groups = [_pair("x", "y", 12.0, FLOOR), _pair("a", "b", 6.0, math.log(1.5)),
              SuspectGroup(("c", "d", "e"), (_edge("c", "d", 3.0, 0.5),)),
              _pair("f", "g", 20.0, 0.6)]  # fmt: skip
    waits = {_p("x", "y"): 1, _p("d", "e"): 2, _p("a", "f"): 7}
    assert group_wait(("c", "d", "e"), waits) == 2 and group_wait(("a", "b"), waits) == 0
    assert confirmation_order(groups, waits) == [2, 0, 3, 1]


def test_waits_count_consecutive_unserved_analyses_by_pair() -> None:
    """Pairs of unserved groups count one more analysis; a pair also held by a group
    dealt with otherwise (served) resets; pairs no longer nominated drop out; a group
    regrouped keeps its pairs' counts (matched by pair, not by member set)."""
    waits = next_waits([("a", "b"), ("c", "d"), ("e", "f")], [0, 1], {_p("e", "f"): 3})
    assert waits == {_p("a", "b"): 1, _p("c", "d"): 1}
    # next analysis: a-b regrouped with x (unserved again), c-d not nominated, x-d served
    waits = next_waits([("a", "b", "x"), ("x", "d")], [0], waits)
    assert waits == {_p("a", "b"): 2, _p("a", "x"): 1, _p("b", "x"): 1}
    assert group_wait(("a", "b"), waits) == 2
    # a pair both in an unserved group and in a served one: served, reset
    both = next_waits([("a", "b", "x"), ("a", "b")], [0], waits)
    assert both == {_p("a", "x"): 2, _p("b", "x"): 2}
    assert next_waits([("a", "b")], [], waits) == {}


def test_waits_of_groups_set_aside_keep_their_count() -> None:
    """A group set aside (``kept``: a short canary pool, a halt) keeps its pairs' counts
    as they were, neither one more nor dropped (before: dropped, its place lost); a
    served group holding a pair still resets it, and an unserved one counts it one
    more; a kept pair that never waited stays out."""
    waits = {_p("a", "b"): 2, _p("c", "d"): 1, _p("e", "f"): 4}
    groups = [("a", "b"), ("c", "d"), ("c", "d", "x"), ("e", "f"), ("e", "f", "y")]
    out = next_waits(groups, [2], waits, kept=[0, 1, 3])
    assert out == {_p("a", "b"): 2, _p("c", "d"): 2, _p("c", "x"): 1, _p("d", "x"): 1}
    assert next_waits([("a", "b")], [], waits) == {}  # without kept: dropped as before


# -- the starvation attack (review brk10, finding 2; its starve.py with a hub) ------------

CYCLES, MAX_CYCLES, SIGMA, BUDGET = 8, 256, 0.05, 6144
REAL = ("a", "b")
SPOKES = 16


def _starve(analyses: int, aging: bool, seed: int = 7) -> list[bool]:
    """Whether the real pair (a, b: log 1.5 when both loaded) is served in each of
    ``analyses`` analyses, all nominating the same groups: the real pair (z 12 at log
    1.5) and 16 decoys {h, x_k} (z 40 at log 1.6: larger margins) sharing the hub h,
    each spoke linked to a (``contention_links``: never started beside the real pair);
    in confirmation rounds a decoy member reports the floor + ~1 se of its pooled
    co-loaded rounds (never confirmed, never futile: 768 rounds per attempt). Driven
    as LiveSimulation._confirm (budget 6,144 rounds per analysis)."""
    rng = np.random.default_rng(seed)
    decoys = [("h", f"x{k:02d}") for k in range(SPOKES)]
    groups = [_pair(*REAL, 12.0, math.log(1.5))]
    groups += [_pair(*d, 40.0, math.log(1.6)) for d in decoys]
    links = [(x, "a") for _, x in decoys]
    co_loaded: dict[tuple[str, tuple[str, ...]], int] = {}
    tested: list[tuple[str, ...]] = []
    flags: list[tuple[str, ...]] = []
    conf_obs: dict[str, deque[ConfirmationObservation]] = {}
    waits: dict[frozenset[str], int] = {}
    rounds = 0

    def observe(load: set[str]) -> ConfirmationObservation:
        nonlocal rounds
        values = {}
        for m in sorted(load):  # one draw per member in a fixed order (not hash order)
            v = rng.normal(0, SIGMA)
            if m in REAL and set(REAL) <= load:
                v += math.log(1.5)
            hit = [d for d in decoys if m in d and set(d) <= load]
            if hit:  # the farm counts its pooled co-loaded rounds per (member, group)
                n = co_loaded[(m, hit[0])] = co_loaded.get((m, hit[0]), 0) + 1
                v += FLOOR + SIGMA * math.sqrt(2.0 / n)
            values[m] = v
        rounds += 1
        return ConfirmationObservation(f"c{rounds:07d}", frozenset(load), values)

    served_real = []
    for an in range(analyses):
        batch = ConfirmationBatch([], f"p/{an}", b"s" * 32, None, links, budget=BUDGET)
        order = confirmation_order(groups, waits if aging else None)
        pending = [i for i in order if not any(set(groups[i].members) <= set(f) for f in flags)]
        served: set[int] = set()
        while True:
            pending = [i for i in pending
                       if fits(first_block_rounds(2, CYCLES), batch.remaining)]  # fmt: skip
            busy = {k for s in batch.active for k in batch.runs[s].members}
            picks = [pending[j] for j in admit([groups[i].members for i in pending], busy, links)]
            for i in picks:
                m = groups[i].members
                prior = {(o.round_id, o.phase): o for k in m for o in conf_obs.get(k, ())}
                batch.add_run(ConfirmationRun(
                    m, CYCLES, MAX_CYCLES, ConfirmConfig(),
                    attempt=prior_attempts(m, tested) + 1,
                    prior=tuple(sorted(prior.values(), key=lambda o: o.round_id)),
                ))  # fmt: skip
                served.add(i)
            pending = [i for i in pending if i not in picks]
            if not batch.active:
                break
            batch.add([observe(set(r.load)) for r in batch.plan()])
        for run in batch.runs:
            tested.append(run.members)
            flags.extend(run.flags)
            for o in run.observations:
                for k in o.loaded:
                    conf_obs.setdefault(k, deque(maxlen=4096)).append(o)
        unserved = [i for i in range(len(groups)) if i not in served]
        waits = next_waits([g.members for g in groups], unserved, waits)
        served_real.append(0 in served)
        assert 0 in served or rounds % BUDGET == 0  # the decoys spent the whole budget
    assert (REAL in flags) == any(served_real)  # served, the real pair is confirmed
    return served_real


def test_aging_serves_the_starved_real_pair_by_the_second_analysis() -> None:
    """Hub + 16 decoy spokes linked to the real pair: by margin alone the decoys spend
    every analysis's budget and the real pair is never served (nothing accrues); with
    the wait counts it waits one analysis and is served (and confirmed) in the second,
    after the decoys left over from the first (they waited as long, with larger
    margins; some of the first's decoy runs stop early, so fewer than a budget's worth
    remain). The same outcome for rng seeds 0-7."""
    assert _starve(4, aging=False) == [False] * 4
    assert _starve(2, aging=True) == [False, True]
