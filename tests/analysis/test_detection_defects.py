"""Regression tests for the detection defects of issue 13, one kind per test."""

from __future__ import annotations

import math

import numpy as np

from netcheck.analysis.confirm import ConfirmationObservation, ConfirmConfig, judge_confirmation
from netcheck.analysis.confirm_run import ConfirmationRun, prior_attempts, spending_weight
from netcheck.analysis.detectors import DetectorConfig, detect, maximal_cliques
from netcheck.analysis.timing import median_polish

KEYS = tuple(f"n{i}" for i in range(60))


def _mixed_rounds(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """60 nodes, 6 farms of 2 (nodes 0-11), 48 rounds of which every 4th loads all."""
    rng = np.random.default_rng(seed)
    loaded = rng.random((60, 48)) < 0.5
    full = np.zeros(48, dtype=bool)
    full[3::4] = True
    loaded[:, full] = True
    y = rng.normal(0, 0.05, (60, 48)) + rng.normal(0, 0.1, (60, 1))
    for f in range(6):
        g = [2 * f, 2 * f + 1]
        y[g] += np.log(1 + 0.5 * np.maximum(loaded[g].sum(axis=0) - 1, 0))
    y[~loaded] = np.nan
    return median_polish(y).residuals, loaded, full


def test_rounds_loading_every_node_carry_no_contention_evidence() -> None:
    """Adding all-loaded rounds to a screening leaves its edges and groups unchanged."""
    for seed in range(4):
        e, loaded, full = _mixed_rounds(seed)
        cfg = DetectorConfig(alpha=0.01, grouping="components")
        with_full = detect(e, loaded, KEYS, cfg)
        without = detect(e[:, ~full], loaded[:, ~full], KEYS, cfg)
        assert with_full.edges == without.edges and with_full.groups == without.groups


def _small_population(n: int, seed: int):  # type: ignore[no-untyped-def]
    """``n`` nodes of which 0 and 1 share a backend (beta 0.8), 24 screening rounds of
    independent coins (no full round), stored as the coordinator stores them."""
    from netcheck.records import StoredRounds

    rng = np.random.default_rng(seed)
    rids = [f"r{i:02d}" for i in range(24)]
    keys = [f"n{i}" for i in range(n)]
    sched = {r: {k: bool(rng.random() < 0.5) for k in keys} for r in rids}
    rows = []
    for r in rids:
        both = sched[r]["n0"] and sched[r]["n1"]
        for i, k in enumerate(keys):
            if sched[r][k]:
                t = np.exp(rng.normal(0.0, 0.03)) * (1.8 if both and i < 2 else 1.0)
                rows.append({"round_id": r, "node_key": k, "released_ns": 0,
                             "arrived_ns": int(t * 1e9), "rtt_s": 0.0, "commitment": "ab"})  # fmt: skip
    return StoredRounds(tuple(rids), dict.fromkeys(rids, "screening"), sched, tuple(rows))


def test_screening_rounds_whose_coins_load_every_node_stay_in_small_populations() -> None:
    """A pair on one backend among 2 or 3 identities is nominated from screening rounds
    alone. Before: every screening round whose coins happened to load all ``n`` nodes was
    dropped as if it were a full round, i.e. at ``n = 2`` every both-loaded round (the
    contention arm), so two identities on one H200 were never suspected (session 9)."""
    from netcheck.analysis.screening import analyse

    for n in (2, 3):
        for seed in range(3):
            got = analyse(_small_population(n, seed), 10.0, DetectorConfig())
            assert ("n0", "n1") in [g.members for g in got.detection.groups], (n, seed)
            assert all(set(g.members) <= {"n0", "n1"} for g in got.detection.groups)


def test_full_rounds_are_dropped_by_kind_not_by_load() -> None:
    """``detect(full_rounds=...)`` drops exactly the marked rounds; without it, every
    all-loaded round (the fallback for callers without round kinds)."""
    e, loaded, full = _mixed_rounds(0)
    cfg = DetectorConfig(alpha=0.01, grouping="components")
    marked = detect(e, loaded, KEYS, cfg, full_rounds=full)
    assert marked.edges == detect(e, loaded, KEYS, cfg).edges
    kept = detect(e, loaded, KEYS, cfg, full_rounds=np.zeros(48, dtype=bool))
    assert kept.edges != marked.edges  # the full rounds, kept, link unrelated farms
    try:
        detect(e, loaded, KEYS, cfg, full_rounds=full[:10])
    except ValueError:
        pass
    else:
        raise AssertionError("a full_rounds of the wrong length must raise")


def test_analysis_reads_only_random_design_rounds() -> None:
    """The coordinator's analysis leaves full-load rounds out of the matrix."""
    from netcheck.analysis.screening import analyse
    from netcheck.records import StoredRounds

    rids = [f"r{i}" for i in range(8)]
    kinds = {r: ("full" if i % 4 == 3 else "screening") for i, r in enumerate(rids)}
    sched = {r: {"a": True, "b": kinds[r] == "full" or i % 2 == 0} for i, r in enumerate(rids)}
    rows = tuple(
        {"round_id": r, "node_key": k, "released_ns": 0, "arrived_ns": 10**9, "rtt_s": 0.0,
         "commitment": "ab"}
        for r in rids for k in ("a", "b") if sched[r][k]
    )  # fmt: skip
    got = analyse(StoredRounds(tuple(rids), kinds, sched, rows), 3.0, DetectorConfig())
    assert got.matrix.round_ids == tuple(r for r in rids if kinds[r] == "screening")


def test_suspect_groups_never_exceed_pairwise_evidence() -> None:
    """A chain of edges a-b, b-c gives the groups {a, b} and {b, c}, never {a, b, c}."""
    rng = np.random.default_rng(3)
    n, rounds = 40, 96
    loaded = rng.random((n, rounds)) < 0.5
    y = rng.normal(0, 0.03, (n, rounds))
    y[1] += 0.4 * loaded[0] + 0.4 * loaded[2]  # node 1 slows with 0 and with 2
    y[0] += 0.4 * loaded[1]
    y[2] += 0.4 * loaded[1]
    y[~loaded] = np.nan
    e = median_polish(y).residuals
    keys = KEYS[:n]
    det = detect(e, loaded, keys, DetectorConfig(use_correlation=False))
    assert {frozenset(g.members) for g in det.groups} == {
        frozenset({"n0", "n1"}),
        frozenset({"n1", "n2"}),
    }
    for g in det.groups:
        have = {frozenset((ed.a, ed.b)) for ed in g.edges}
        assert all(frozenset((a, b)) in have for a in g.members for b in g.members if a < b)
    assert maximal_cliques([0, 1, 2, 3], [(0, 1), (1, 2), (0, 2), (2, 3)]) == [(0, 1, 2), (2, 3)]


def _drive(run: ConfirmationRun, backend: dict[str, int], seed: int) -> None:
    """Run a confirmation on a noiseless-ish model: backend id per member, beta = 0.5."""
    rng = np.random.default_rng(seed)
    n_round = 0
    while not run.done:
        block = []
        for load in run.next_block():
            values = {}
            for m in load:
                mates = sum(1 for o in load if o != m and backend[o] == backend[m])
                values[m] = math.log(2.0 * (1 + 0.5 * mates)) + float(rng.normal(0, 0.03))
            block.append(ConfirmationObservation(f"c{n_round}", frozenset(load), values))
            n_round += 1
        run.add(block)


def test_confirmation_splits_a_group_of_two_farms() -> None:
    """Two farms in one suspect group give two flags, one per farm, not one."""
    backend = {"a": 1, "b": 1, "c": 2, "d": 2}
    run = ConfirmationRun(("a", "b", "c", "d"))
    _drive(run, backend, 1)
    assert run.flags == [("a", "b"), ("c", "d")]


def test_confirmation_tests_every_member() -> None:
    """An honest member of a suspect group is not in the flag; the farm members are."""
    backend = {"a": 1, "b": 1, "h": 3, "c": 1}
    run = ConfirmationRun(("a", "b", "h", "c"))
    _drive(run, backend, 2)
    assert run.flags == [("a", "b", "c")]


def test_effect_floor_is_a_hypothesis_not_a_point_estimate() -> None:
    """A slowdown estimated just above the floor but not significantly above it passes
    no member."""
    floor = math.log(1.25)
    alone = [0.0 + d for d in (-0.04, 0.04) * 8]
    co = [floor + 0.02 + d for d in (-0.04, 0.04) * 8]
    obs = [ConfirmationObservation(f"g{i}", frozenset({"a", "b"}), {"a": v, "b": v})
           for i, v in enumerate(co)]  # fmt: skip
    obs += [ConfirmationObservation(f"a{i}", frozenset({m}), {m: v})
            for i, v in enumerate(alone) for m in ("a", "b")]  # fmt: skip
    res = judge_confirmation(("a", "b"), obs, ConfirmConfig())
    assert all(t.effect > floor for t in res.members)
    assert res.confirmed_members == ()


def test_repeated_confirmations_spend_a_finite_error_budget() -> None:
    """The k-th confirmation of a group's pairs gets alpha * 6/(pi^2 k^2); all sum to alpha."""
    assert sum(spending_weight(k) for k in range(1, 100_000)) < 1.0
    cfg = ConfirmConfig(alpha=1e-3)
    levels = [ConfirmationRun(("a", "b"), cfg=cfg, attempt=k).alpha for k in (1, 2, 3)]
    assert levels == [1e-3 * spending_weight(k) for k in (1, 2, 3)]
    assert prior_attempts(["a", "b"], [("a", "b", "c"), ("a", "x"), ("b", "a")]) == 2
