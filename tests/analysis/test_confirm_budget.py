"""A confirmation budget per analysis, strongest nominations first
(netcheck.analysis.confirm_budget and ConfirmationBatch's budget)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netcheck.analysis.confirm import ConfirmationObservation, ConfirmConfig
from netcheck.analysis.confirm_batch import ConfirmationBatch
from netcheck.analysis.confirm_budget import (
    BUDGET_SPENT,
    confirmation_order,
    edge_margin,
    first_block_rounds,
    fits,
    group_strength,
)
from netcheck.analysis.confirm_run import ConfirmationRun
from netcheck.analysis.detector_config import Edge, SuspectGroup

SECRET = bytes(range(32))
FLOOR = math.log(1.25)


def _edge(a: str, b: str, z: float, effect: float, detector: str = "A-mutual") -> Edge:
    floor = 0.5 if detector == "B" else FLOOR
    return Edge(a, b, detector, z, math.inf, 1e-6, 1e-3, effect, floor, 16)


def _group(*edges: Edge) -> SuspectGroup:
    return SuspectGroup(tuple(sorted({k for e in edges for k in (e.a, e.b)})), edges)


def test_strength_is_the_evidence_above_the_floor_not_above_zero() -> None:
    """A pair slowing each other exactly at the floor (review5) has a large z but no
    margin; a farm with a smaller z far above the floor comes first; a correlation
    edge is rescaled in Fisher's atanh units."""
    at_floor = _edge("x", "y", 12.0, FLOOR)
    farm = _edge("a", "b", 6.0, math.log(1.5))
    assert edge_margin(at_floor) == pytest.approx(0.0, abs=1e-12)
    assert edge_margin(farm) == pytest.approx(6.0 * (1 - FLOOR / math.log(1.5)))
    corr = _edge("c", "d", 5.0, 0.8, "B")
    assert edge_margin(corr) == pytest.approx(5.0 * (1 - math.atanh(0.5) / math.atanh(0.8)))
    assert edge_margin(_edge("e", "f", math.inf, 0.5)) == -math.inf
    assert group_strength(SuspectGroup(("p", "q"), ())) == -math.inf
    assert group_strength(_group(at_floor, _edge("x", "z", 3.0, 0.5))) == pytest.approx(
        3.0 * (1 - FLOOR / 0.5)
    )


def test_confirmation_order_serves_the_strongest_first_ties_in_detector_order() -> None:
    """Groups ordered by their strongest edge's margin; equal margins and edgeless
    groups keep the detector's order (edgeless last)."""
    groups = [
        _group(_edge("x", "y", 12.0, FLOOR)),  # at the floor: 0
        SuspectGroup(("u", "v"), ()),  # -inf
        _group(_edge("a", "b", 6.0, math.log(1.5))),  # 2.7
        _group(_edge("c", "d", 3.0, 0.4)),  # 1.3
        _group(_edge("e", "f", 3.0, 0.4)),  # 1.3, after c-d
        SuspectGroup(("s", "t"), ()),
    ]
    assert confirmation_order(groups) == [2, 3, 4, 0, 1, 5]


@pytest.mark.parametrize("size", [2, 3, 5])
def test_first_block_rounds_is_the_runs_first_block(size: int) -> None:
    members = tuple("abcde"[:size])
    assert first_block_rounds(size, 8) == len(ConfirmationRun(members, 8, 256).next_block())
    assert fits(24, None) and fits(24, 24) and not fits(25, 24)


def _drive_step(batch: ConfirmationBatch, rng: np.random.Generator) -> int:
    """One shared step of honest noise (no slowdown); returns its rounds."""
    rounds = batch.plan()
    batch.add([ConfirmationObservation(f"r{batch.spent + i}", r.load,
                                       {k: rng.normal(0, 0.05) for k in r.load})
               for i, r in enumerate(rounds)])  # fmt: skip
    return len(rounds)


CFG = ConfirmConfig(futility_stop=False)  # honest noise would stop them at look 2


def test_budget_stops_only_the_runs_whose_next_block_does_not_fit() -> None:
    """Budget 72 with 8 cycles: a pair's looks add 24, 24, 48 rounds. Run A starts,
    run B joins after one step; at step 3 A's third block (48) does not fit the 24 left
    and A is stopped (BUDGET_SPENT) while B's second block (24) still runs; then B is
    stopped too. The batch ran exactly 72 rounds. Without a budget both go on."""
    rng = np.random.default_rng(0)
    a = ConfirmationRun(("a", "b"), 8, 256, CFG)
    batch = ConfirmationBatch([a], "p/r", SECRET, budget=72)
    assert _drive_step(batch, rng) == 24 and batch.remaining == 48
    b = ConfirmationRun(("c", "d"), 8, 256, CFG)
    slot_b = batch.add_run(b)
    assert _drive_step(batch, rng) == 24 and batch.remaining == 24
    assert _drive_step(batch, rng) == 24
    assert batch.stopped == {0: BUDGET_SPENT} and batch.active == [slot_b]
    assert len(a.observations) == 48 and len(b.observations) == 48
    assert _drive_step(batch, rng) == 0  # B's 48 do not fit either
    assert batch.stopped == {0: BUDGET_SPENT, slot_b: BUDGET_SPENT} and batch.active == []
    assert batch.spent == 72 and batch.remaining == 0
    assert a.done and a.flags == [] and a.group_result is not None  # closed: cleared, live

    free = ConfirmationBatch([ConfirmationRun(("a", "b"), 8, 256, CFG)], "p/r", SECRET)
    assert free.remaining is None
    assert [_drive_step(free, rng) for _ in range(3)] == [24, 24, 48]
    assert free.stopped == {} and free.active == [0]


def test_budget_counts_rounds_run_not_rounds_skipped() -> None:
    """Rounds handed back as None (not run: every run in them stopped) cost nothing."""
    batch = ConfirmationBatch([ConfirmationRun(("a", "b"), 8, 256, CFG)], "p/r", SECRET,
                              budget=100)  # fmt: skip
    rounds = batch.plan()
    batch.add([None] * len(rounds))
    assert batch.spent == 0 and batch.remaining == 100
    with pytest.raises(ValueError, match="budget"):
        ConfirmationBatch([], "p/r", budget=-1)


def _block(run: ConfirmationRun, rng: np.random.Generator, slowed: list[frozenset[str]]) -> None:
    """Run ``run``'s next block: a loaded member is slowed by log 2 in a round whose
    load set is one of ``slowed``."""
    out = []
    for i, load in enumerate(run.next_block()):
        hit = frozenset(load) in slowed
        out.append(ConfirmationObservation(f"{run.phase}{len(run.observations) + i}", frozenset(load),
                                           {k: (math.log(2) if hit else 0.0) + rng.normal(0, 0.01)
                                            for k in load}))  # fmt: skip
    run.add(out)


def test_a_run_closed_by_the_budget_in_its_split_phase_keeps_the_pairs_it_confirmed() -> None:
    """A group of 4 whose members all slow down when the group is loaded, but only a-b
    slow each other alone: after the split phase's first look a-b is confirmed and c, d
    are not, so the run goes on (not done). The budget stop closes it there: a-b is
    its flag, as at the phase's last look; a run closed in its group phase gets none,
    and one not judged yet stays without a result."""
    rng = np.random.default_rng(3)
    run = ConfirmationRun(("a", "b", "c", "d"), 8, 32)
    whole, ab = frozenset("abcd"), frozenset("ab")
    _block(run, rng, [whole])
    assert run.phase == "split" and not run.done
    _block(run, rng, [ab])
    assert not run.done and run.flags == []
    run.close()
    assert run.done and run.flags == [("a", "b")]

    grouped = ConfirmationRun(("a", "b", "c"), 4, 16, CFG)
    _block(grouped, rng, [])
    assert grouped.phase == "group" and not grouped.done
    grouped.close()
    assert grouped.done and grouped.flags == []
    fresh = ConfirmationRun(("a", "b"), 4, 16)
    fresh.close()
    assert not fresh.done and fresh.group_result is None
