"""Disjoint suspect groups confirmed in shared rounds (netcheck.analysis.confirm_batch):
packing, secret block order, merging, restriction, the stored context, the batch driver,
and the error bound with a farm in the same rounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netcheck.analysis.confirm import ConfirmationObservation, ConfirmConfig
from netcheck.analysis.confirm_batch import (
    ConfirmationBatch,
    ContextPart,
    admit,
    batch_links,
    block_order,
    contention_links,
    context_parts,
    merge_blocks,
    restrict,
    round_context,
)
from netcheck.analysis.confirm_run import ConfirmationRun
from netcheck.analysis.timing import TimingMatrix

SECRET = bytes(range(32))


def test_admit_starts_disjoint_unlinked_groups_in_order() -> None:
    """Waiting groups start in order when they share no node with the busy nodes or the
    groups picked before them; ``limit`` caps the picks; every pick is disjoint."""
    groups = [("a", "b"), ("b", "c"), ("d", "e"), ("a", "f"), ("c", "g"), ("h", "i", "j")]
    assert admit(groups, set()) == [0, 2, 4, 5]
    assert admit(groups, {"a", "d"}) == [1, 5]
    assert admit(groups, set(), limit=1) == [0]
    picked = [k for i in admit(groups, set()) for k in groups[i]]
    assert len(picked) == len(set(picked))
    assert admit([], set()) == []


def test_admit_keeps_linked_groups_apart() -> None:
    """Disjoint groups joined by a link (one farm cut into cliques by a missing edge)
    do not start together, nor beside a running group they are linked to."""
    groups = [("a", "b"), ("c", "d"), ("e", "f")]
    assert admit(groups, set()) == [0, 1, 2]
    assert admit(groups, set(), [("b", "c")]) == [0, 2]
    assert admit(groups[1:], {"a", "b"}, [("b", "c")]) == [1]
    assert admit(groups, set(), [("x", "y")]) == [0, 1, 2]


def test_contention_links_find_siblings_the_detector_left_unlinked() -> None:
    """Screening rounds where u and v slow each other by 0.4 (log) and w and 20 more
    nodes are independent, with a common round effect: only (u, v) is linked at half the
    floor; a node seen in fewer than 2 rounds of a condition links nothing; unknown
    members are ignored."""
    rng = np.random.default_rng(3)
    keys = ("u", "v", "w", *(f"h{i}" for i in range(20)))
    loaded = rng.random((len(keys), 48)) < 0.5
    y = rng.normal(0, 0.05, loaded.shape) + rng.normal(0, 0.2, 48)
    y[0] += 0.4 * loaded[1]
    y[1] += 0.4 * loaded[0]
    y = np.where(loaded, y, np.nan)
    rids = tuple(f"r{i}" for i in range(48))
    mat = TimingMatrix(y, loaded, np.zeros_like(loaded), keys, rids)
    floor = ConfirmConfig().effect_floor
    assert contention_links(mat, ["u", "v", "w", "x"], floor / 2) == [("u", "v")]
    few = TimingMatrix(y[:, :3], loaded[:, :3], np.zeros((len(keys), 3), bool), keys, rids[:3])
    assert contention_links(few, keys, floor / 2) == []
    groups = [("u", "a"), ("v", "b")]
    assert admit(groups, set(), batch_links(groups, [], mat, floor / 2)) == [0]


def test_block_order_is_a_secret_deterministic_permutation_within_cycles() -> None:
    """Same secret and block id: the same order; each cycle's rounds stay in their
    slice; another secret, look or group gives another order; bad input raises."""
    order = block_order(SECRET, ("p/r1/0", "a,b", "1", "0"), 24, 8)
    assert order == block_order(SECRET, ("p/r1/0", "a,b", "1", "0"), 24, 8)
    assert sorted(order) == list(range(24))
    assert all(sorted(order[3 * c : 3 * c + 3]) == [3 * c, 3 * c + 1, 3 * c + 2] for c in range(8))
    others = [block_order(bytes(32), ("p/r1/0", "a,b", "1", "0"), 24, 8),
              block_order(SECRET, ("p/r1/0", "a,b", "1", "1"), 24, 8),
              block_order(SECRET, ("p/r1/0", "a,c", "1", "0"), 24, 8)]  # fmt: skip
    assert all(o != order for o in others)
    with pytest.raises(ValueError, match="secret"):
        block_order(b"short", ("x",), 3, 1)
    with pytest.raises(ValueError, match="multiple"):
        block_order(SECRET, ("x",), 10, 3)
    with pytest.raises(ValueError, match="NUL"):
        block_order(SECRET, ("x\0y",), 3, 1)


def test_block_order_is_uniform_per_position() -> None:
    """Over many block ids, each position of a 3-round cycle holds each round about a
    third of the time (what makes another run's load independent of this run's
    condition)."""
    counts = np.zeros((3, 3))
    for i in range(3000):
        for pos, j in enumerate(block_order(SECRET, (str(i),), 3, 1)):
            counts[pos, j] += 1
    assert np.all(np.abs(counts / 3000 - 1 / 3) < 0.04)


def test_merge_blocks_unions_loads_and_idles_shorter_blocks() -> None:
    """Round j loads the union of the blocks' j-th sets; a shorter block's run has no
    part after its end; overlapping runs raise."""
    rounds = merge_blocks({0: [{"a", "b"}, {"a"}, {"b"}], 1: [{"c", "d", "e"}, {"c"}]})
    assert [set(r.load) for r in rounds] == [{"a", "b", "c", "d", "e"}, {"a", "c"}, {"b"}]
    assert [sorted(r.parts) for r in rounds] == [[0, 1], [0, 1], [0]]
    assert rounds[1].parts[1] == frozenset({"c"})
    with pytest.raises(ValueError, match="two runs"):
        merge_blocks({0: [{"a"}], 1: [{"a", "c"}]})


def test_restrict_keeps_only_the_runs_members() -> None:
    """A run sees its own loaded members and their times only."""
    obs = ConfirmationObservation("r", frozenset({"a", "c", "d"}), {"a": 1.0, "c": 2.0, "d": 3.0})
    got = restrict(obs, ("a", "b"))
    assert got.loaded == frozenset({"a"}) and dict(got.log_service) == {"a": 1.0}
    assert got.round_id == "r"


def test_context_parts_read_shared_and_older_single_run_contexts() -> None:
    """A shared round's context gives one part per run (its loaded set cut to the
    round's); an older single-run context gives the whole round as its part; contexts
    without a tested set (alone stage) give none."""
    ctx = round_context("p/r/0", [
        {"group": ["a", "b"], "phase": "group", "look": 0, "tested": ["a", "b"], "loaded": ["a"]},
        {"group": ["c", "d"], "phase": "split", "look": 2, "tested": ["c", "d"],
         "loaded": ["c", "d"]},
    ])  # fmt: skip
    ctx["runs"].append("junk")
    loaded = frozenset({"a", "c", "d"})
    assert context_parts(ctx, loaded) == [
        ContextPart("group", frozenset({"a", "b"}), frozenset({"a"})),
        ContextPart("split", frozenset({"c", "d"}), frozenset({"c", "d"})),
    ]
    old = {"group": ["a", "b"], "phase": "group", "look": 0, "tested": ["a", "b"]}
    assert context_parts(old, frozenset({"a"})) == [
        ContextPart("group", frozenset({"a", "b"}), frozenset({"a"}))
    ]
    assert context_parts({"slowness": "a", "round": 0}, frozenset({"a"})) == []


def _obs(rid: str, load: frozenset[str], times: dict[str, float]) -> ConfirmationObservation:
    return ConfirmationObservation(rid, load, {k: times[k] for k in load})


def _drive(batch: ConfirmationBatch, service, rng: np.random.Generator) -> int:  # type: ignore[no-untyped-def]
    """Run the batch on ``service(load, rng) -> {node: log time}``; returns rounds run."""
    n = 0
    while batch.active:
        obs = []
        for rnd in batch.plan():
            obs.append(_obs(f"r{n:05d}", rnd.load, service(rnd.load, rng)))
            n += 1
        batch.add(obs)
    return n


def test_batch_runs_finish_independently_and_see_only_their_members() -> None:
    """A 3-member group runs longer than a pair; the pair idles in the shared rounds
    past its block; each run's observations carry only its members; the batch costs
    the rounds of its longest run, fewer than the two runs one after the other."""
    runs = [ConfirmationRun(("a", "b"), 3, 6), ConfirmationRun(("c", "d", "e"), 3, 6)]

    def service(load: frozenset[str], rng: np.random.Generator) -> dict[str, float]:
        farm = len(load & {"c", "d", "e"})
        return {k: (math.log(1 + 0.8 * (farm - 1)) if k in "cde" else 0.0)
                + rng.normal(0, 0.02) for k in load}  # fmt: skip

    batch = ConfirmationBatch(runs, "p/r/0", SECRET)
    first = batch.plan()
    assert len(first) == 12 and sum(0 in r.parts for r in first) == 9  # pair idles 3 rounds
    rounds = _drive(batch, service, np.random.default_rng(0))
    assert all(r.done for r in runs) and batch.stopped == {}
    assert all(o.loaded <= {"a", "b"} and set(o.log_service) <= {"a", "b"}
               for o in runs[0].observations)  # fmt: skip
    assert all(o.loaded <= {"c", "d", "e"} for o in runs[1].observations)
    assert runs[0].verdict == "cleared"
    assert runs[1].flags == [("c", "d", "e")]
    alone = sum(len(r.observations) for r in runs)
    assert rounds == max(len(r.observations) for r in runs) < alone
    with pytest.raises(ValueError, match="disjoint"):
        ConfirmationBatch([ConfirmationRun(("a", "b")), ConfirmationRun(("b", "c"))], "x")


def test_stopped_run_leaves_the_shared_rounds_others_go_on() -> None:
    """A stopped run's load sets leave the remaining rounds (live), it is judged no
    more; the other run completes."""
    runs = [ConfirmationRun(("a", "b"), 3, 6), ConfirmationRun(("c", "d"), 3, 6)]
    batch = ConfirmationBatch(runs, "p/r/0", SECRET)
    rounds = batch.plan()
    batch.stop(0, "a left")
    live = [batch.live(r) for r in rounds]
    assert all(x is not None and set(x.load) <= {"c", "d"} and list(x.parts) == [1] for x in live)
    ctx = batch.context(live[0])  # type: ignore[arg-type]
    assert [e["group"] for e in ctx["runs"]] == [["c", "d"]]
    rng = np.random.default_rng(1)
    batch.add([_obs(f"r{i}", x.load, {k: rng.normal(0, 0.02) for k in x.load})  # type: ignore[union-attr]
               for i, x in enumerate(live)])  # fmt: skip
    assert runs[0].observations == [] and len(runs[1].observations) == 9
    assert batch.active == [1]
    with pytest.raises(ValueError, match="plan"):
        batch.add([])
    batch.plan()
    with pytest.raises(ValueError, match="one observation"):
        batch.add([])


def test_a_waiting_group_starts_when_a_finished_run_frees_its_members() -> None:
    """Runs join between steps only and never beside an active run sharing a member;
    once that run is done, the overlapping group can join the running batch."""
    first = ConfirmationRun(("a", "b"), 3, 3)
    batch = ConfirmationBatch([first], "p/r", SECRET)
    with pytest.raises(ValueError, match="disjoint"):
        batch.add_run(ConfirmationRun(("b", "c"), 3, 3))
    slot = batch.add_run(ConfirmationRun(("d", "e"), 3, 6))
    rounds = batch.plan()
    with pytest.raises(ValueError, match="between steps"):
        batch.add_run(ConfirmationRun(("x", "y"), 3, 3))
    rng = np.random.default_rng(2)
    batch.add([_obs(f"r{i}", r.load, {k: rng.normal(0, 0.02) for k in r.load})
               for i, r in enumerate(rounds)])  # fmt: skip
    assert first.done and batch.active == [slot]  # max_cycles 3: one look
    late = batch.add_run(ConfirmationRun(("b", "c"), 3, 3))
    assert sorted(batch.active) == [slot, late]
    assert all(set(r.load) <= {"b", "c", "d", "e"} for r in batch.plan())


def test_without_secret_a_single_run_keeps_its_planned_order() -> None:
    """No secret (one group at a time): the rounds are the run's block as planned."""
    run = ConfirmationRun(("a", "b"), 3, 6)
    batch = ConfirmationBatch([run], "x")
    assert [set(r.load) for r in batch.plan()] == run.next_block()


def test_honest_pair_beside_a_farm_in_shared_rounds_is_not_flagged() -> None:
    """The error argument (docs/confirmation-batches.md): an honest pair coupled 10% to
    each other and 10% to a farm member of another group (20% in all, below the 25%
    floor), confirmed in shared rounds with that farm, is flagged in none of 200
    histories while the farm is flagged in nearly all; with the coupling above the floor
    (50% + 50%) the same harness flags the pair (it can see a slowdown)."""

    def histories(coupling: float) -> tuple[int, int]:
        honest = farm = 0
        for seed in range(200):
            rng = np.random.default_rng([seed, 7])

            def service(load: frozenset[str], rng: np.random.Generator) -> dict[str, float]:
                out = {}
                for k in load:
                    if k in ("f1", "f2", "f3"):
                        slow = 1 + 0.5 * (len(load & {"f1", "f2", "f3"}) - 1)
                    elif k == "h1":
                        slow = 1 + coupling * ("h2" in load) + coupling * ("f1" in load)
                    else:
                        slow = 1 + coupling * ("h1" in load)
                    out[k] = math.log(slow) + rng.normal(0, 0.05)
                return out

            runs = [ConfirmationRun(("h1", "h2"), 8, 64, ConfirmConfig()),
                    ConfirmationRun(("f1", "f2", "f3"), 8, 64, ConfirmConfig())]  # fmt: skip
            _drive(ConfirmationBatch(runs, f"p/{seed}/0", SECRET), service, rng)
            honest += bool(runs[0].flags)
            farm += runs[1].flags == [("f1", "f2", "f3")]
        return honest, farm

    honest, farm = histories(0.1)
    assert honest == 0 and farm >= 190
    assert histories(0.5)[0] >= 150


def _split_block(
    batch: ConfirmationBatch, rng: np.random.Generator, slowed: frozenset[str]
) -> None:
    """One shared step: a loaded member is slowed by log 2 in the rounds that load all of
    ``slowed`` (and nothing else of its run)."""
    rounds = batch.plan()
    batch.add([_obs(f"r{batch.spent + i}", r.load,
                    {k: (math.log(2) if r.load == slowed else 0.0) + rng.normal(0, 0.01)
                     for k in r.load})
               for i, r in enumerate(rounds)])  # fmt: skip


@pytest.mark.parametrize("reason", ["1 member(s) left", "no node connected"])
def test_a_stopped_run_keeps_the_pairs_its_split_phase_confirmed(reason: str) -> None:
    """A run stopped for any reason (a member left, no node connected) ends like one the
    budget stops: closed at its last judged look, the pairs its split phase confirmed
    there are its flags. Before, only the budget stop closed a run; a farm member that
    left after the split phase's first look (a-b confirmed, the third member c
    keeping the phase open) turned its confirmed pair into a cleared record."""
    rng = np.random.default_rng(3)
    run = ConfirmationRun(("a", "b", "c"), 8, 32)
    batch = ConfirmationBatch([run], "p/r/0", SECRET)
    _split_block(batch, rng, frozenset("abc"))
    assert run.phase == "split" and not run.done
    _split_block(batch, rng, frozenset("ab"))
    assert not run.done and run.flags == []
    batch.stop(0, reason)
    assert run.done and run.flags == [("a", "b")]
    assert batch.active == [] and batch.stopped == {0: reason}

    fresh = ConfirmationRun(("d", "e"), 8, 32)  # stopped before its first look: no result
    idle = ConfirmationBatch([fresh], "p/r/1", SECRET)
    idle.plan()
    idle.stop(0, reason)
    assert not fresh.done and fresh.group_result is None and idle.active == []
