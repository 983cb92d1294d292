"""Screening coins in confirmation rounds (netcheck.analysis.coins,
docs/screening-in-confirmation.md): the load rule, the stored context, and what the
screening analysis and the slowness test read from such rounds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from netcheck.analysis.coins import (
    COIN_RULE,
    HMAC_RULE,
    coin_context,
    coin_load_rule,
    held_nodes,
    screen_round_ids,
)
from netcheck.analysis.confirm_batch import ConfirmationBatch
from netcheck.analysis.confirm_run import ConfirmationRun
from netcheck.analysis.detectors import DetectorConfig
from netcheck.analysis.schedule import screening_plan
from netcheck.analysis.screening import analyse
from netcheck.analysis.slowness import SlownessConfig, persistent_slowness
from netcheck.lab.sim.population import PopulationSpec, make_population
from netcheck.records import StoredRounds

SECRET = bytes(range(32))
KEYS = [f"n{i:02d}" for i in range(40)]


def test_the_coin_rule_loads_the_plan_and_a_coin_for_every_node_not_held() -> None:
    """Planned nodes are loaded, other held nodes never, the rest by the screening bit."""
    held = {"n00", "n01", "n02"}
    rule = coin_load_rule(SECRET, {"n00"}, held)
    for rid in ("c1", "c2", "c3"):
        got = rule(rid, KEYS)
        bits = screening_plan(SECRET, rid, KEYS)
        assert "n00" in got and not got & {"n01", "n02"}
        assert got - {"n00"} == {k for k in KEYS if k not in held and bits[k]}
    assert rule("c1", KEYS) != rule("c2", KEYS)
    with pytest.raises(ValueError, match="held"):
        coin_load_rule(SECRET, {"x"}, held)


def test_held_nodes_reads_only_a_well_formed_coin_entry() -> None:
    assert held_nodes(coin_context({"b", "a"})) == frozenset({"a", "b"})
    assert coin_context({"b", "a"}) == {"coins": {"rule": HMAC_RULE, "held": ["a", "b"]}}
    for bad in (None, {}, {"coins": []}, {"coins": {"rule": "other/2", "held": []}},
                {"coins": {"rule": HMAC_RULE, "held": "ab"}},
                {"coins": {"rule": HMAC_RULE, "held": [1]}}):  # fmt: skip
        assert held_nodes(bad) is None


def test_a_batch_holds_its_members_and_their_linked_neighbours() -> None:
    """With coins the batch's rounds are drawn by the coin rule (stored as COIN_RULE)
    around the runs' plans; the held set is every active member plus linked nodes;
    without coins the planned set is loaded as before."""
    run = ConfirmationRun(("n00", "n01"), 3, 6)
    batch = ConfirmationBatch([run], "p/r", SECRET, SECRET, links=[("n01", "n05"), ("n07", "n08")])
    assert batch.held() == {"n00", "n01", "n05"} and batch.rule == COIN_RULE
    rnd = batch.plan()[0]
    load = batch.load(rnd)
    assert callable(load)
    got = load("c-1", KEYS)
    assert got & batch.held() == rnd.load and len(got) > len(rnd.load)
    assert held_nodes(batch.context(rnd)) == batch.held()
    plain = ConfirmationBatch([ConfirmationRun(("n00", "n01"), 3, 6)], "p/r", SECRET)
    prnd = plain.plan()[0]
    assert plain.load(prnd) == set(prnd.load) and plain.rule == "explicit"
    assert "coins" not in plain.context(prnd)


def _stored(rounds: list[tuple[str, str, dict[str, bool], dict[str, Any]]], pop: Any,
            rng: np.random.Generator) -> StoredRounds:  # fmt: skip
    """Simulated rows of ``pop`` for ``(round_id, kind, schedule, context)`` rounds."""
    results = []
    for r, (rid, _kind, plan, _ctx) in enumerate(rounds):
        for row in pop.simulate_round(rid, plan, rng, start_ns=r * 10**11):
            if row.loaded:
                results.append({"round_id": rid, "node_key": row.node_key,
                                "released_ns": row.released_ns, "arrived_ns": row.arrived_ns,
                                "rtt_s": row.rtt_s, "commitment": "ab"})  # fmt: skip
    return StoredRounds(
        tuple(r[0] for r in rounds), {r[0]: r[1] for r in rounds},
        {r[0]: r[2] for r in rounds}, tuple(results), {r[0]: r[3] for r in rounds if r[3]},
    )  # fmt: skip


def test_screening_reads_coin_nodes_and_leaves_held_cells_out() -> None:
    """Two farms of 2 among 30 nodes, 48 confirmation rounds and no screening round:
    the first farm's members draw coins, the second farm is held and loaded by a
    confirmation plan (both, one alone, the other alone). The analysis finds the first
    farm from the coins alone; the held farm's cells are not observed (NaN, not
    censored, load bits kept), so its plan-driven contention links nobody. The same rows
    read as plain screening rounds (no coin entry) would link the held farm: the
    blanking is what keeps the plan out."""
    rng = np.random.default_rng(11)
    spec = PopulationSpec(n_nodes=30, farm_sizes=(2, 2), cohosted_pairs=0, sigma_w=0.03, beta=1.0)
    pop = make_population(spec, rng)
    coin_farm, held_farm = (tuple(f) for f in pop.farms)
    keys = list(pop.node_keys)
    plans = [set(held_farm), {held_farm[0]}, {held_farm[1]}]
    rounds = []
    for r in range(48):
        rid = f"confirm-{r:04d}"
        load = coin_load_rule(SECRET, plans[r % 3], held_farm)(rid, keys)
        rounds.append((rid, "confirmation", {k: k in load for k in keys}, coin_context(held_farm)))
    stored = _stored(rounds, pop, rng)
    assert screen_round_ids(stored, full=False) == list(stored.round_ids)
    cfg = DetectorConfig(alpha=0.01)
    got = analyse(stored, 3 * spec.t_ref_s, cfg)
    groups = [set(g.members) for g in got.detection.groups]
    assert set(coin_farm) in groups
    assert not any(g & set(held_farm) for g in groups)
    rows = [got.matrix.node_keys.index(k) for k in held_farm]
    assert np.isnan(got.matrix.y[rows]).all() and not got.matrix.censored[rows].any()
    assert got.matrix.loaded[rows].sum() == 64  # 16 rounds both, 16 each alone
    as_screening = StoredRounds(stored.round_ids, dict.fromkeys(stored.round_ids, "screening"),
                                stored.schedules, stored.results)  # fmt: skip
    plain = analyse(as_screening, 3 * spec.t_ref_s, cfg)
    assert any(set(held_farm) <= set(g.members) for g in plain.detection.groups)


def test_confirmation_rounds_without_coins_stay_out_of_screening() -> None:
    rng = np.random.default_rng(3)
    pop = make_population(PopulationSpec(n_nodes=8, farm_sizes=(), cohosted_pairs=0), rng)
    keys = list(pop.node_keys)
    rounds = [(f"s{r}", "screening", screening_plan(SECRET, f"s{r}", keys), {}) for r in range(4)]
    rounds.append(("c0", "confirmation", {k: k == keys[0] for k in keys}, {"group": keys[:2]}))
    rounds.append(("c1", "confirmation", {k: True for k in keys}, coin_context(keys[:1])))
    stored = _stored(rounds, pop, rng)
    assert screen_round_ids(stored, full=False) == ["s0", "s1", "s2", "s3", "c1"]
    assert analyse(stored, 1.0, DetectorConfig()).matrix.round_ids == ("s0", "s1", "s2", "s3", "c1")


def test_slowness_reads_no_coin_round() -> None:
    """The persistent-slowness test stays on screening rounds: a coin node's co-hosted
    neighbour may be held and loaded by a plan more often than a coin would, which
    raises an honest node's ratios (seen in the benchmark's false-flag population: an
    honest node slow-flagged at 128 rounds when coin rounds were read)."""
    rng = np.random.default_rng(5)
    pop = make_population(PopulationSpec(n_nodes=6, farm_sizes=(), cohosted_pairs=0), rng)
    keys = list(pop.node_keys)
    rounds = [(f"c{r}", "confirmation", dict.fromkeys(keys, True), coin_context(keys[:1]))
              for r in range(10)]  # fmt: skip
    rounds += [(f"s{r}", "screening", dict.fromkeys(keys, True), {}) for r in range(9)]
    stored = _stored(rounds, pop, rng)
    report = persistent_slowness(stored, pop.spec.t_ref_s, 1, SlownessConfig(min_rounds=8))
    assert {n.node_key: n.n for n in report.nodes} == dict.fromkeys(keys, 9)
    assert math.isfinite(report.nodes[0].p_value)
