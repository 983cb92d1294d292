"""Tests for netcheck.lab.sim.live: the coordinator's detection loop on simulated nodes."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from netcheck.analysis.alone import AloneConfig
from netcheck.analysis.coins import held_nodes
from netcheck.analysis.screening import round_kind
from netcheck.analysis.slowness import SlownessConfig, SlownessReport
from netcheck.lab.sim import live
from netcheck.lab.sim.live import LiveConfig, LiveSimulation, legacy_config
from netcheck.lab.sim.population import Population, PopulationSpec, make_population

SPEC = PopulationSpec(n_nodes=30, farm_sizes=(5,), cohosted_pairs=2, beta=1.0)


def test_round_mix_and_window_follow_the_coordinator() -> None:
    """Every 4th round loads every node; the analysis window holds screening rounds only
    (both kinds under the legacy config)."""
    pop = make_population(SPEC, np.random.default_rng(1))
    sim = LiveSimulation(pop, LiveConfig(), np.random.default_rng(2))
    kinds = [sim.screening_round() for _ in range(8)]
    assert kinds == [round_kind(i, 4) for i in range(8)]
    full = [r for r in sim.state.round_ids if sim.state.kinds[r] == "full"]
    assert all(all(sim.state.schedules[r].values()) for r in full)
    assert set(sim.stored().kinds.values()) == {"screening"}
    old = LiveSimulation(pop, legacy_config(), np.random.default_rng(2))
    for _ in range(8):
        old.screening_round()
    assert set(old.stored().kinds.values()) == {"screening", "full"}


def test_capacity_strikes_at_the_real_deadline() -> None:
    """A farm of 5 on one GPU of the claimed class (beta = 1) misses the deadline when
    co-loaded: capacity flags within 16 rounds; no honest node is flagged."""
    pop = make_population(SPEC, np.random.default_rng(3))
    sim = LiveSimulation(pop, LiveConfig(analyze_every=10**6), np.random.default_rng(4))
    snap = sim.run([16])[-1]
    farm = set(pop.farms[0])
    assert snap.capacity & farm and not snap.capacity & pop.honest
    assert snap.analyses == 0 and snap.rounds == 16
    assert snap.capacity_legacy & farm  # the fixed-count rule before, same verdicts
    cfg = LiveConfig(analyze_every=10**6, capacity_legacy=True)
    legacy = LiveSimulation(pop, cfg, np.random.default_rng(4)).run([16])[-1]
    assert legacy.capacity == legacy.capacity_legacy == snap.capacity_legacy


def test_the_derived_deadline_rule_calibrates_as_the_product_does() -> None:
    """``deadline_rule="derived"``: derive_deadline of the honest nodes' alone service
    times (a co-hosted node's divided by 1 + benign_coupling), slack 2 x the RTT jitter,
    the default max_rtt, coupling 0.2; the same draws as ``legacy`` (the runs stay
    comparable); LiveConfig's default since session 13 (legacy_config keeps legacy)."""
    spec = PopulationSpec(n_nodes=40, farm_sizes=(2,), cohosted_pairs=19,
                          benign_coupling=0.5, sigma_w=0.02, speed_sd=0.0)  # fmt: skip
    pop = make_population(spec, np.random.default_rng(5))
    rng_l, rng_d = np.random.default_rng(6), np.random.default_rng(6)
    legacy = live.sim_profile(pop, rng_l, deadline_rule="legacy")
    derived = live.sim_profile(pop, rng_d, deadline_rule="derived")
    assert rng_l.random() == rng_d.random()
    assert (legacy.deadline.a, legacy.deadline.slack_s, legacy.deadline.coupling) == (1.5, 0.5, 0)
    d = derived.deadline
    assert (d.coupling, d.max_rtt_s, d.slack_s) == (0.2, 0.1, round(2 * spec.rtt_jitter_s, 4))
    # every honest node is co-hosted and coupled by 50% in the draws: alone times are
    # near t_ref, so is the median; the pooled p99 is of the alone times
    assert d.t_ref_s == pytest.approx(spec.t_ref_s, rel=0.05)
    assert d.p99_s < 1.2 * spec.t_ref_s < legacy.deadline.p99_s
    assert derived.deadline_s(0.0) == pytest.approx(
        max(d.a * d.t_ref_s, d.b * d.p99_s) * 1.2 + d.slack_s
    )
    given = live.sim_profile(pop, np.random.default_rng(6), deadline_rule="derived", a=3.0)
    assert given.deadline.a == 3.0 and given.deadline.b == d.b
    with pytest.raises(ValueError, match="deadline_rule"):
        live.sim_profile(pop, np.random.default_rng(6), deadline_rule="x")  # type: ignore[arg-type]
    assert LiveConfig().deadline_rule == "derived" and legacy_config().deadline_rule == "legacy"
    cfg = LiveConfig(deadline_rule="derived")
    sim = LiveSimulation(pop, cfg, np.random.default_rng(6), secret=bytes(32))
    assert sim.profile.deadline == d


def test_the_card_deadline_rule_calibrates_on_one_card_of_the_class() -> None:
    """``deadline_rule="card"``: derive_deadline of one reference card's batches (speed 1,
    the spec's sigma_w and round effect), not of the population: slow, noisy or coupled
    honest cards do not widen it, so at sigma_w 0.05 it is tighter than ``derived``."""
    spec = PopulationSpec(n_nodes=60, farm_sizes=(2,), cohosted_pairs=10, benign_coupling=0.2,
                          sigma_w=0.05, speed_sd=0.2)  # fmt: skip
    pop = make_population(spec, np.random.default_rng(5))
    card = live.sim_profile(pop, np.random.default_rng(6), deadline_rule="card")
    derived = live.sim_profile(pop, np.random.default_rng(6), deadline_rule="derived")
    d = card.deadline
    assert d.coupling == 0.2 and d.t_ref_s == pytest.approx(spec.t_ref_s, rel=0.02)
    # one card at log-sd sqrt(0.05^2 + 0.02^2): p99 about exp(2.33 * 0.054) = 1.13 t_ref
    assert d.p99_s == pytest.approx(1.13 * spec.t_ref_s, rel=0.04)
    assert card.deadline_s(0.0) < 0.85 * derived.deadline_s(0.0)  # speed spread 20% not in it
    assert LiveSimulation(pop, LiveConfig(deadline_rule="card"), np.random.default_rng(6),
                          secret=bytes(32)).profile.deadline == d  # fmt: skip


def test_the_floors_follow_the_load_probability_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At q = 2/3 the simulator holds the capacity test to null_p0 and the slowness
    report carries q (its null rate and the nomination floor follow), as the
    coordinator does; ``floors_for_q=False`` keeps the calibration for 1/2 (the
    baseline)."""
    pop = make_population(SPEC, np.random.default_rng(3))
    seen: list[float] = []
    real = live.persistent_slowness

    def spy(*args: Any) -> SlownessReport:
        seen.append(args[4])
        return real(*args)

    monkeypatch.setattr(live, "persistent_slowness", spy)
    for flag, q_floor in ((True, 2 / 3), (False, 0.5)):
        seen.clear()
        cfg = LiveConfig(load_probability=2 / 3, floors_for_q=flag, analyze_every=16)
        sim = LiveSimulation(pop, cfg, np.random.default_rng(4))
        assert sim._capacity_cfg.load_probability == q_floor
        sim.run([16])
        assert seen == [q_floor]


def test_the_capacity_test_reads_each_rounds_share_as_the_coordinator_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Session 12: the simulator hands the capacity test each round's share as
    ``checks.stored_round_shares`` reads it from the stored rules and rows (q per
    screening round, 1 per full or group confirmation round, 0 per alone round); with
    ``floors_for_q=False`` none (the null of q = 1/2, the baseline)."""
    pop = make_population(SPEC, np.random.default_rng(3))
    seen: list[Any] = []
    real = live.capacity_test

    def spy(*args: Any) -> Any:
        seen.append(args[3])
        return real(*args)

    monkeypatch.setattr(live, "capacity_test", spy)
    for flag in (True, False):
        seen.clear()
        cfg = LiveConfig(load_probability=2 / 3, floors_for_q=flag, analyze_every=16)
        sim = LiveSimulation(pop, cfg, np.random.default_rng(4))
        sim.run([32])
        assert seen
        if not flag:
            assert all(shares is None for shares in seen)
            continue
        kinds = sim.state.round_shares.keys() & set(sim.state.kinds)
        assert {sim.state.kinds[r] for r in kinds} >= {"screening", "full", "confirmation"}
        by_kind: dict[str, set[float]] = {}
        for r in kinds:
            by_kind.setdefault(sim.state.kinds[r], set()).add(sim.state.round_shares[r])
        # confirmation: group rounds 1, alone rounds (one node loaded) 0
        assert by_kind == {"screening": {2 / 3}, "full": {1.0}, "confirmation": {0.0, 1.0}}
        assert all(shares is sim.state.round_shares for shares in seen)


def test_padded_pairs_on_the_claimed_class_are_caught_by_slowness() -> None:
    """Padded pairs (every answer held back to 1.5 t_ref, beta 0.5, a backend of the
    claimed class) pass the deadline and show no contention; the persistent-slowness
    test (its rejections judged alone) flags them by 32 rounds (none escaped it before:
    slowness=None), and flags no honest node, co-hosted pairs at 20% coupling included."""
    spec = PopulationSpec(n_nodes=40, farm_sizes=(2, 2, 2), cohosted_pairs=6,
                          benign_coupling=0.2, adversary="pad")  # fmt: skip
    pop = make_population(spec, np.random.default_rng(5))
    caught = {}
    for name, cfg in (("slowness", LiveConfig()), ("before", LiveConfig(slowness=None))):
        snap = LiveSimulation(pop, cfg, np.random.default_rng(6), secret=bytes(32)).run([32])[0]
        flagged = snap.slow | snap.capacity | snap.relay | {k for f in snap.shared_flags for k in f}
        caught[name] = [bool(set(f) & flagged) for f in pop.farms]
        assert not snap.slow & pop.honest
    assert caught == {"slowness": [True] * 3, "before": [False] * 3}


def test_padded_pairs_near_the_floor_are_caught_alone() -> None:
    """Padded pairs at beta 0.3 (1.3 t_ref, just above the screening floor 1.25) are
    mostly caught by 32 rounds once slowness nominees are judged on rounds loading them
    alone (floor 1.2); without the alone stage most escape; no honest node is flagged.
    (A pair on a card faster than the class pads to within the floor and escapes both.)
    Both at load probability 1/2 (named: at 2/3 a co-hosted honest node's partner is
    loaded in most of its rounds, its median screening ratio sits at the coupling, 1.2 x
    its card, and the screening floor without the alone stage flags slow honest
    cards)."""
    spec = PopulationSpec(n_nodes=40, farm_sizes=(2, 2, 2, 2), cohosted_pairs=6,
                          benign_coupling=0.2, adversary="pad", beta=0.3)  # fmt: skip
    caught = {"alone": 0, "before": 0}
    for seed in (10, 11, 12):
        pop = make_population(spec, np.random.default_rng(seed))
        for name, cfg in (
            ("alone", LiveConfig()),
            ("before", LiveConfig(alone=None, load_probability=0.5)),
        ):
            sim = LiveSimulation(pop, cfg, np.random.default_rng(seed + 1), secret=bytes(32))
            snap = sim.run([32])[0]
            flagged = (
                snap.slow | snap.capacity | snap.relay | {k for f in snap.shared_flags for k in f}
            )
            caught[name] += sum(bool(set(f) & flagged) for f in pop.farms)
            assert not snap.slow & pop.honest
    assert caught["alone"] >= 9 and caught["before"] <= 3, caught


def test_a_promising_alone_attempt_is_followed_by_the_next_in_the_simulator() -> None:
    """As in the coordinator: at alpha 5e-5 with 8 rounds per attempt, a padded pair
    (1.5 t_ref alone) is not flagged by 8 or 16 alone rounds but is promising, so each
    nominee of the first analysis gets 3 attempts at once and is flagged at the third
    (24 confirmation rounds each); with max_attempts 1 (before session 7) one attempt each
    and no flag yet. No honest node is flagged."""
    spec = PopulationSpec(n_nodes=40, farm_sizes=(2, 2, 2), cohosted_pairs=6,
                          benign_coupling=0.2, adversary="pad")  # fmt: skip
    pop = make_population(spec, np.random.default_rng(5))
    got = {}
    for tries in (3, 1):
        cfg = LiveConfig(alone=AloneConfig(rounds=8, alpha=5e-5, max_attempts=tries))
        sim = LiveSimulation(pop, cfg, np.random.default_rng(6), secret=bytes(32))
        snap = sim.run([16])[0]
        assert snap.analyses == 1 and not snap.slow & pop.honest
        got[tries] = (snap.slow, dict(sim.state.alone_attempts), snap.confirmation_rounds)
    nominees = set(got[3][1])  # padded identities only
    assert len(nominees) >= 2 and nominees <= {k for f in pop.farms for k in f}
    assert got[3] == (nominees, dict.fromkeys(nominees, 3), 24 * len(nominees))
    assert got[1] == (frozenset(), dict.fromkeys(nominees, 1), 8 * len(nominees))


@dataclass(frozen=True)
class _SharedHost(Population):
    """EMULATION: the population with ``host`` (node indices) on one machine: each is
    slowed ``coupling`` when any other of them is loaded (benign; with 4 on a host a
    neighbour is loaded in 7/8 of the screening rounds)."""

    host: tuple[int, ...] = ()
    coupling: float = 0.2

    def service_times(
        self, loaded: npt.NDArray[np.bool_], rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        s = super().service_times(loaded, rng)
        for i in self.host:
            if any(loaded[j] for j in self.host if j != i):
                s[i] *= 1.0 + self.coupling
        return s


def test_an_honest_slow_card_slowed_by_its_neighbours_is_cleared_alone() -> None:
    """An honest card 15% slower than the class on a host with 3 other cards (each
    slowed 20% by any other loaded, so in 7/8 of its screening rounds: 1.38 t_ref
    there, 1.15 alone) violates the screening floor's null: the persistent-slowness
    test rejects it. Its rejection now only sends it to the alone stage, where it is
    under the floor 1.2: no flag; a padded pair (1.5 t_ref) is still flagged. With the
    rejection flagging by itself (``direct_flags``, before session 6) the honest card is
    flagged slow."""
    spec = PopulationSpec(n_nodes=12, farm_sizes=(2,), cohosted_pairs=0, adversary="pad",
                          speed_sd=0.0)  # fmt: skip
    pop = make_population(spec, np.random.default_rng(7))
    host = tuple(i for i, f in enumerate(pop.farm_of) if f < 0)[:4]
    drawn = {f.name: getattr(pop, f.name) for f in fields(Population)}
    drawn["speed"] = pop.speed.copy()
    drawn["speed"][host[0]] = 1.15
    shared = _SharedHost(**drawn, host=host)
    slow_card = pop.node_keys[host[0]]
    got, judged = {}, {}
    for direct in (False, True):
        # the legacy deadline: t_ref stays the class's 2 s (the derived rule would take the
        # median of these honest times, 4 of 10 coupled by a host the calibration cannot see)
        cfg = LiveConfig(slowness=SlownessConfig(direct_flags=direct), deadline_rule="legacy")
        sim = LiveSimulation(shared, cfg, np.random.default_rng(8), secret=bytes(32))
        got[direct] = sim.run([128])[0].slow
        judged[direct] = sim.state.alone_attempts.get(slow_card, 0)
        assert set(pop.farms[0]) <= got[direct]
    assert not got[False] & pop.honest and judged[False] > 0  # judged alone, cleared
    assert got[True] & pop.honest == {slow_card}


def test_confirmation_rounds_with_coins_enter_the_window_and_memory_stays_flat() -> None:
    """With ``confirm_coins`` the confirmation rounds are kept as screening data: the
    analysis window holds them (with their held sets), the slowness window does not,
    coin nodes are loaded in them and held nodes only by plan; rows of coin rounds that
    left the window are forgotten. Without coins no confirmation round is kept."""
    pop = make_population(SPEC, np.random.default_rng(5))
    cfg = LiveConfig(window_rounds=32, confirm_coins=True)
    sim = LiveSimulation(pop, cfg, np.random.default_rng(6))
    sim.run([32])
    st = sim.state
    assert st.confirmation_rounds > 2 * cfg.window_rounds  # the farm of 5 was confirmed
    stored = sim.stored()
    coin = [r for r in stored.round_ids if stored.kinds[r] == "confirmation"]
    assert coin and len(stored.round_ids) == cfg.window_rounds
    for rid in coin:
        held = held_nodes(stored.contexts[rid])
        assert held is not None
        loaded = {k for k, on in stored.schedules[rid].items() if on}
        assert loaded - held  # coins loaded nodes outside the runs
    assert set(sim.stored(coins=False).kinds.values()) == {"screening"}
    assert len(st.contexts) <= 2 * cfg.window_rounds and len(st.results) <= 32 + 2 * 32
    plain = LiveSimulation(pop, LiveConfig(window_rounds=32, confirm_coins=False),
                           np.random.default_rng(6))  # fmt: skip
    plain.run([32])
    assert set(plain.stored().kinds.values()) == {"screening"} and not plain.state.contexts
