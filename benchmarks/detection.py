"""Benchmark (issue 13): proxy farms found and caught, false flags, on EMULATED populations
run through the live coordinator's detection loop (:mod:`netcheck.lab.sim.live`).

Every run replays the coordinator: every 4th screening round loads every node, verdicts
at the profile deadline (calibrated on the honest nodes: ``p99`` of their alone times),
the capacity test after every late/missing verdict (netcheck.analysis.lateness,
confirmation rounds included), relay test, analysis + confirmation every 16 rounds over the last 128, flags
persisting as in the database. Snapshots at 16/32/64/128 screening rounds.

Population (unless a scenario says otherwise): 200 identities = 8 farms of 2, 6 of 3, 4
of 5 (54 farm identities) + 146 honest, 10 honest co-hosted pairs with 20% benign
coupling (the worst case asked for), sigma_w 0.05 (per-node spread 0.3), beta 0.5,
speed spread 5%, round effect 2%. n = 100 / 1,000 scale the farm counts. False-flag
scenarios (``--ff-seeds`` runs each, ``--ff-sigma`` 0.05 and 0.15): 100 honest nodes,
30 co-hosted pairs coupling 20%, no farm: every flag there is false. The ``h200 ...``
scenarios (session 15, ``H200``): the class the product ships, as measured on real H200s
(sigma_w 0.01, beta 0.9, speed spread 1%, ``T_ref`` 2.23 s); not in the issue's grid,
their figures are printed after the goals as information (:func:`shipped_class`).

Columns per scenario x config x R x farm size k:
``found`` = farms with a confirmed shared-backend flag holding 2+ of their identities
(contention); ``caught`` = found, or any identity capacity-, relay- or slow-flagged
(the persistent-slowness test, :mod:`netcheck.analysis.slowness`; answer level never
fires: the simulated farms compute their own batches); ``c-0`` (k = 2 shown) = caught
without the slowness test (the path before it, same run: the test reads the stored
rows and changes nothing else); per scenario x config x R: ``FF`` = honest nodes
inside confirmed shared-backend flags (sum over seeds), ``mixed`` = flags naming
identities of 2+ farms (sum), ``HS`` = honest suspects per analysis (mean), ``capH``
= honest capacity flags (sum), ``slH`` = honest slow flags (sum), ``conf`` =
confirmation rounds spent (mean), ``an`` = analyses run (sum).

Configs: ``new`` = current defaults; ``old`` = the behaviour before issue 13
(:func:`netcheck.sim.live.legacy_config`); ``tky`` (``--tukey``) = current defaults with
Tukey's median polish (``DetectorConfig.round_prior_cells = 0``); ``s3``
(``--config s3``) = the behaviour at the end of session 3 (the "before" of session 4);
``s4`` = the end of session 4 (the "before" of session 5); ``coins`` = current
defaults with screening coins in confirmation rounds (``confirm_coins``, session 6;
``s5`` = explicitly off, the defaults); ``s6slow`` = current defaults with the
persistent-slowness test flagging by itself (``SlownessConfig.direct_flags``, the
behaviour before session 6); ``s6`` = the end of session 6 (a confirmation cap of 128
cycles; the alone stage's sign-test nomination, one alone attempt per analysis);
``s6alone`` = current defaults with session 6's alone stage only; ``s7`` = the end of
session 7 (nomination FDR 0.25, 2 rounds per arm for the mutual test; the "before" of
session 8); ``s8`` = the end of session 8 (a pair with one testable direction is
untestable: ``DetectorConfig.mutual_one_way`` off; the "before" of session 9); ``m2`` =
current defaults with 2 rounds per arm; ``p23`` / ``p23c`` = current defaults
with screening load probability 2/3 (``screening_load_probability``; the floors follow
q since session 9), ``p23raw`` the same with the floors of 1/2, ``p23c0`` without moving
the alone nomination floor; ``nobud`` / ``bud192`` ... ``bud6144`` = the confirmation
budget per analysis off / at that many rounds (``confirm_budget_rounds``); ``info`` = current
defaults with information look spending (``ConfirmConfig.look_spending``); ``s5a`` =
current defaults with the mutual test's BH family of every testable pair
(``DetectorConfig.mutual_fdr_family = "all"``); all measured in the same run. The ``small`` scenarios (6-20 identities) are the populations where a farm is
half of a round's loaded nodes.

Goals (printed and checked at the end, each with its status; ``--check`` exits 1 when
one is missed): G1 plain and jitter farms of 2 found >= 0.95 in every scenario of the
grid from the first checkpoint whose screening rounds allow it (:func:`g1_rounds`): 16
rounds, the issue's wording, since session 9 (12 screening rounds, every 4th round
being full; ``pair_coverage(12, 1, either_direction=True)`` = 0.968 with the mutual
test's one round per arm and one testable direction). In sessions 3-8 it was 32 rounds
(24 screening), because a pair then needed both directions and the coverage at 12
screening rounds was 0.906 (0.558 with two rounds per arm before session 8); the
16-round figure is printed beside it. G2 every farm on a backend of the claimed class caught by 32
rounds; G3 found and caught never fall as rounds grow; G4 zero confirmed false flags
over >= 1,000 analyses with benign coupling up to 20%: honest nodes in shared-backend
flags (FF), slow flags (slH) and capacity flags (capH).

Run: ``.venv/bin/python benchmarks/detection.py [--seeds 2] [--quick] [--old] [--check]
[--json PATH] [--from-json PATH...]``. ``--quick``: base and padded scenarios and the
false-flag scenario only, 1 seed (for iteration, 1-2 minutes); ``--old``: also the
``old`` config; ``--scenario NAME`` / ``--config C`` / ``--first-seed S``: one
scenario (``--list`` prints the names), config or seed range (a job of
``benchmarks/detection_device.sh``, which runs the whole grid as parallel jobs); ``--from-json``: table and goals over the rows of
several runs, rows of one scenario split over seeds merged, with ``--markdown`` (the
table for docs/detection.md) and ``--plot PATH`` (found/caught against rounds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from netcheck.analysis.alone import AloneConfig
from netcheck.analysis.confirm import ConfirmConfig
from netcheck.analysis.detector_config import DetectorConfig
from netcheck.analysis.schedule import pair_coverage
from netcheck.analysis.slowness import SlownessConfig
from netcheck.lab.sim.live import LiveConfig, LiveSimulation, Snapshot, legacy_config
from netcheck.lab.sim.population import Population, PopulationSpec, make_population

ROUNDS = (16, 32, 64, 128)
SIZES = (2, 3, 5)
BASE = PopulationSpec(benign_coupling=0.2)
H200 = replace(BASE, sigma_w=0.01, beta=0.9, speed_sd=0.01, t_ref_s=2.23)


def farms_for(n: int) -> tuple[int, ...]:
    """Farm sizes for ``n`` identities: the default 18 farms scaled by ``n / 200``."""
    scale = max(n / 200.0, 0.5)
    counts = {2: round(8 * scale), 3: round(6 * scale), 5: round(4 * scale)}
    return tuple(k for k in (2, 3, 5) for _ in range(counts[k]))


@dataclass(frozen=True)
class Scenario:
    """One benchmark scenario: a population spec and its labels."""

    name: str
    spec: PopulationSpec
    adversary: str  # plain / jitter / pad / selective / fast / combinations
    claimed_class: bool  # backend of the claimed class (goal G2)
    grid: bool = False  # plain/jitter grid cell (goal G1)


def scenarios() -> list[Scenario]:
    """The adversary library at the base population, then the grid for plain/jitter."""
    fast2 = {"backend_speedup": 2.0}
    out = [
        Scenario("plain", BASE, "plain", True, True),
        Scenario("jitter", replace(BASE, adversary="jitter"), "jitter", True, True),
        Scenario("pad", replace(BASE, adversary="pad"), "pad", True),
        Scenario("selective", replace(BASE, adversary="selective"), "selective", True),
        Scenario("fast f=2", replace(BASE, **fast2), "fast", False),  # type: ignore[arg-type]
        Scenario(
            "pad+fast(all k)",
            replace(BASE, adversary="pad", farm_backend="fast"),
            "pad+fast",
            False,
        ),  # fmt: skip
        Scenario(
            "selective+jitter",
            replace(BASE, adversary="selective+jitter"),
            "selective+jitter",
            True,
        ),  # fmt: skip
        Scenario("pad+jitter", replace(BASE, adversary="pad+jitter"), "pad+jitter", True),
        Scenario("pad s=0.15", replace(BASE, adversary="pad", sigma_w=0.15), "pad", True),
        Scenario("pad b=0.3", replace(BASE, adversary="pad", beta=0.3), "pad", True),
        Scenario(
            "relay 30ms", replace(BASE, relay_leg_s=0.03, farm_backend="fast"), "relay+fast", False
        ),  # fmt: skip
    ]
    # the class the product ships, as measured on real H200s (`h200-torch-bf16`, three
    # cards: a batch's log-sd 0.007 alone on an idle host, co-load slowdown beta 0.90-0.91,
    # cards 1% apart; docs/capacity.md "Pooling several cards"); sigma_w 0.01 leaves room
    # for a busier host. Not in the issue's grid (sigma_w 0.03-0.15): the grid's classes
    # are ones the capacity gate refuses (benchmarks/detection_scope.py), this one it admits
    for adv in ("plain", "jitter", "pad", "selective", "pad+jitter"):
        spec = replace(H200, adversary="none" if adv == "plain" else adv)
        out.append(Scenario(f"h200 {adv}", spec, adv, True))
    for f in (1.2, 1.5):  # a faster card than the class, padded: not the claimed class
        spec = replace(H200, adversary="pad", backend_speedup=f)
        out.append(Scenario(f"h200 pad f={f:g}", spec, "pad+fast", False))
    h200_honest = replace(H200, n_nodes=100, farm_sizes=(), cohosted_pairs=30)
    out.append(Scenario("h200 honest only, 30 pairs at 20%", h200_honest, "none", True))
    # small operators: a farm is half of a round's loaded nodes (round effects must not
    # absorb its contention; DetectorConfig.round_prior_cells)
    small: tuple[tuple[str, dict[str, Any]], ...] = (
        ("small n=6 pair", {"n_nodes": 6, "farm_sizes": (2,), "cohosted_pairs": 1}),
        ("small n=12 k=2,5", {"n_nodes": 12, "farm_sizes": (2, 5), "cohosted_pairs": 2}),
        ("small n=20 k=2,3,5", {"n_nodes": 20, "farm_sizes": (2, 3, 5), "cohosted_pairs": 2}),
    )
    for name, kw_small in small:
        out.append(Scenario(name, replace(BASE, **kw_small), "plain", True))
    for adv in ("plain", "jitter"):
        for label, kw in (
            ("n=100 s=0.03 b=1.0", {"n_nodes": 100, "sigma_w": 0.03, "beta": 1.0}),
            ("n=200 s=0.15 b=0.5", {"sigma_w": 0.15}),
            ("n=200 s=0.05 b=0.3", {"beta": 0.3}),
            ("n=1000 s=0.05 b=0.5", {"n_nodes": 1000}),
        ):
            spec = replace(BASE, adversary="none" if adv == "plain" else adv, **kw)  # type: ignore[arg-type]
            spec = replace(spec, farm_sizes=farms_for(spec.n_nodes))
            out.append(Scenario(f"{adv} {label}", spec, adv, True, True))
    return out


QUICK = ("plain", "pad", "pad s=0.15", "pad b=0.3")


def false_flag_scenario(sigma_w: float) -> Scenario:
    """Honest nodes only (100, 30 co-hosted pairs coupling 20%) at timing noise
    ``sigma_w``: every flag is false."""
    name = "honest only, 30 pairs at 20%" + ("" if sigma_w == 0.05 else f", s={sigma_w:g}")
    spec = PopulationSpec(n_nodes=100, farm_sizes=(), cohosted_pairs=30, benign_coupling=0.2,
                          sigma_w=sigma_w)  # fmt: skip
    return Scenario(name, spec, "none", True)


def at_speed(sc: Scenario, speed_sd: float | None) -> Scenario:
    """``sc`` with honest and farm cards' speed spread ``speed_sd`` (log-sd; None: as
    is), renamed ``"<name> sp=<speed_sd>"`` so that rows of both spreads can be merged.
    The population's 5% is an assumption; real H200s of one model measure about 1%
    (docs/capacity.md, "Pooling several cards")."""
    if speed_sd is None:
        return sc
    return replace(sc, name=f"{sc.name} sp={speed_sd:g}", spec=replace(sc.spec, speed_sd=speed_sd))


def score(pop: Population, snap: Snapshot) -> dict[str, Any]:
    """Metrics of one snapshot against the ground truth (module docstring)."""
    farms = [set(f) for f in pop.farms]
    honest = pop.honest
    flagged0 = snap.capacity | snap.relay
    flagged = flagged0 | snap.slow
    found = [any(len(set(fl) & f) >= 2 for fl in snap.shared_flags) for f in farms]
    caught = [fd or bool(f & flagged) for fd, f in zip(found, farms, strict=True)]
    caught0 = [fd or bool(f & flagged0) for fd, f in zip(found, farms, strict=True)]
    farm_of = {k: i for i, f in enumerate(farms) for k in f}
    mixed = sum(1 for fl in snap.shared_flags if len({farm_of.get(k, -1) for k in fl}) > 1)
    out: dict[str, Any] = {
        "FF": len({k for fl in snap.shared_flags for k in fl} & honest),
        "mixed": mixed,
        "HS": float(np.mean([len(s & honest) for s in snap.suspects])) if snap.suspects else 0.0,
        "capH": len(snap.capacity & honest),
        "slH": len(snap.slow & honest),
        "conf": snap.confirmation_rounds,
        "an": snap.analyses,
    }
    for k in SIZES:
        idx = [i for i, f in enumerate(farms) if len(f) == k]
        out[f"found{k}"] = [found[i] for i in idx]
        out[f"caught{k}"] = [caught[i] for i in idx]
        out[f"c0{k}"] = [caught0[i] for i in idx]
    return out


def before_s10(make: Callable[[], LiveConfig]) -> Callable[[], LiveConfig]:
    """``make``'s config with session 10's default changes undone (load probability 1/2,
    ``capacity_p0`` 2%, the confirmation budget's margin order without waiting): the
    configs standing for sessions 3-8 go through it, so that a change of the defaults
    does not move what they measure."""
    return lambda: replace(make(), load_probability=0.5, capacity_p0=0.02, confirm_aging=False)


CONFIGS: dict[str, Any] = {
    "new": LiveConfig,
    "old": legacy_config,
    # current defaults with Tukey's median polish (round effects unshrunk): the
    # baseline of DetectorConfig.round_prior_cells
    "tky": lambda: LiveConfig(detector=DetectorConfig(round_prior_cells=0)),
    # the behaviour at the end of session 3 (the "before" of session 4, same run): each
    # confirmation attempt judged on its own rounds, 4 / 16 cycles, no futility stop, a
    # pair's level halved for a split phase it never runs, no mutual pair test, no
    # alone-round slowness stage
    "s3": before_s10(
        lambda: LiveConfig(
            load_probability=0.5,
            pool_rounds=0,
            alone=None,
            confirm_cycles=4,
            confirm_max_cycles=16,
            confirm=ConfirmConfig(
                futility_stop=False,
                pair_phases=2,
                group_phases=2,
                member_level="bonferroni",
                look_schedule="constant",
            ),
            detector=DetectorConfig(mutual_test=False),
            capacity_legacy=True,  # 3 late/missing of the last 8 verdicts (session 3)
            confirm_batching=False,
            confirm_budget_rounds=0,
        )
    ),  # fmt: skip
    # current defaults, suspect groups confirmed one at a time (before shared rounds,
    # docs/confirmation-batches.md): the baseline of LiveConfig.confirm_batching
    "serial": lambda: LiveConfig(confirm_batching=False),
    # the behaviour at the end of session 4 (the "before" of session 5, same run): each
    # member of a pair tested at half the level (Bonferroni over members, not the
    # intersection-union test), the mutual pair test at the Bonferroni level only, looks
    # after every 8 cycles up to 64 (not at 8, 16, 32, 64, 128)
    "s4": before_s10(
        lambda: LiveConfig(
            load_probability=0.5,
            confirm_max_cycles=64,
            confirm=ConfirmConfig(member_level="bonferroni", look_schedule="constant"),
            detector=DetectorConfig(mutual_fdr=0.0, mutual_min_rounds=2, mutual_one_way=False),
            confirm_batching=False,  # one group at a time (session 4)
            confirm_budget_rounds=0,
        )
    ),
    # current defaults but the mutual test's BH over every testable pair's own p (the
    # first session-5 version): pairs below the effect floors loosen the level too
    "s5a": lambda: LiveConfig(detector=DetectorConfig(mutual_fdr_family="all")),
    # the behaviour at the end of session 5 (the "before" of session 6, same run):
    # confirmation rounds load the groups under test only, no screening coins for the
    # other nodes (docs/screening-in-confirmation.md); today's default too
    "s5": before_s10(lambda: LiveConfig(confirm_coins=False)),
    # current defaults with screening coins in confirmation rounds (session 6, off by
    # default: more pairs found per screening round, 2-9x the confirmation rounds)
    "coins": lambda: LiveConfig(confirm_coins=True),
    # current defaults but the persistent-slowness test flags by itself (before session
    # 6; now its rejections only go to the alone stage, which raises the flag)
    "s6slow": lambda: LiveConfig(slowness=SlownessConfig(direct_flags=True)),
    # the behaviour at the end of session 6 (the "before" of session 7, same run): a
    # confirmation cap of 128 cycles (5 looks) and the alone stage of session 6
    # (nomination by the sign test, one alone attempt per nominee and analysis), load
    # probability 1/2, nomination at FDR 0.25
    "s6": before_s10(
        lambda: LiveConfig(
            confirm_max_cycles=128,
            alone=AloneConfig(nominate_test="sign", max_attempts=1),
            load_probability=0.5,
            detector=DetectorConfig(mutual_fdr=0.25, mutual_min_rounds=2, mutual_one_way=False),
            confirm_budget_rounds=0,
        )
    ),
    # the behaviour at the end of session 7 (the "before" of session 8, same run): the
    # mutual test's nomination at FDR 0.25
    "s7": before_s10(
        lambda: LiveConfig(
            detector=DetectorConfig(mutual_fdr=0.25, mutual_min_rounds=2, mutual_one_way=False),
            confirm_budget_rounds=0,
        )
    ),
    # the behaviour at the end of session 8 (the "before" of session 9, same run): a pair
    # with one testable direction is untestable (DetectorConfig.mutual_one_way = False),
    # no confirmation budget per analysis (confirm_budget_rounds = 0)
    "s8": before_s10(
        lambda: LiveConfig(detector=DetectorConfig(mutual_one_way=False), confirm_budget_rounds=0)
    ),
    # current defaults but the mutual test needing 2 rounds per arm (session 7): the
    # baseline of DetectorConfig.mutual_min_rounds (FDR 0.75 in both)
    "m2": lambda: LiveConfig(detector=DetectorConfig(mutual_min_rounds=2)),
    # current defaults with the empirical-Bayes prior on node variances worth 30 degrees
    # of freedom instead of 10 (DetectorConfig.prior_df): session 11's lever from the
    # model bound (benchmarks/detection_bounds.py; on ideal rows it closes about half the
    # gap between the mutual test and the oracle); measured, not the default
    "pdf30": lambda: LiveConfig(detector=DetectorConfig(prior_df=30.0)),
    # current defaults with screening load probability 2/3 (built in session 8, not the
    # default; since session 9 the floors follow q, so this equals p23c; still not the
    # default: one honest capacity flag through the whole benchmark,
    # docs/detection-history.md "Session 9")
    "p23": lambda: LiveConfig(load_probability=2 / 3, capacity_p0=0.02),
    # q 2/3 with the floors accounting for it (session 9, helper cal9; the same as p23
    # since then: LiveConfig.floors_for_q is on by default): the capacity null
    # lateness.null_p0, the screening sign test's null rate slowness.null_rate and the
    # signed-rank nomination's floor alone.nominate_floor
    "p23c": lambda: LiveConfig(load_probability=2 / 3, floors_for_q=True, capacity_p0=0.02),
    # q 2/3 with the floors calibrated for 1/2 (p23 as measured in session 8): the
    # baseline of p23c
    "p23raw": lambda: LiveConfig(load_probability=2 / 3, floors_for_q=False, capacity_p0=0.02),
    # p23c but the signed-rank nomination's floor not moved for q (AloneConfig.coupling
    # 0): the capacity and screening nulls follow q, the nomination stays at 1.2 (more
    # honest co-hosted nominees judged alone; padded pairs near the floor nominated)
    "p23c0": lambda: LiveConfig(
        load_probability=2 / 3, alone=AloneConfig(coupling=0.0), capacity_p0=0.02
    ),
    # session 9's load probability (1/2) and capacity_p0 (2%) with the rest of today's
    # defaults, the budget's waiting order included (the "before" of session 10's run)
    "s9": lambda: LiveConfig(load_probability=0.5, capacity_p0=0.02),
    # session 10: the capacity test's null rate for noisy co-hosted honest cards
    # (capacity_p0 3% / 4% instead of 2%, docs/detection.md "Capacity test"), at load
    # probability 1/2 ("p3", "p4") and 2/3 with the floors following q ("p23c3" = the
    # defaults since session 10, "p23c4"); "f8": a full round every 8th screening round instead of every 4th (14
    # screening rounds of 16 instead of 12)
    "p3": lambda: LiveConfig(load_probability=0.5, capacity_p0=0.03),
    "p4": lambda: LiveConfig(load_probability=0.5, capacity_p0=0.04),
    "p23c3": lambda: LiveConfig(load_probability=2 / 3, capacity_p0=0.03),
    "p23c4": lambda: LiveConfig(load_probability=2 / 3, capacity_p0=0.04),
    "f8": lambda: LiveConfig(full_every=8),
    "p23c4f8": lambda: LiveConfig(load_probability=2 / 3, capacity_p0=0.04, full_every=8),
    # current defaults but the session-6 alone stage only (the alone7 change's baseline)
    "s6alone": lambda: LiveConfig(alone=AloneConfig(nominate_test="sign", max_attempts=1)),
    # current defaults but each confirmation look at the share of the cycles it adds
    # (ConfirmConfig.look_spending = "information"; measured, not the default)
    "info": lambda: LiveConfig(confirm=ConfirmConfig(look_spending="information")),
    # session 9 (helper bud9): the confirmation budget per analysis, strongest groups
    # first (netcheck.analysis.confirm_budget); "nobud" = the same order with no bound
    # (confirm_budget_rounds = 0), the baseline of the budget; "budN" = N rounds
    "nobud": lambda: LiveConfig(confirm_budget_rounds=0),
    "bud192": lambda: LiveConfig(confirm_budget_rounds=192),
    "bud384": lambda: LiveConfig(confirm_budget_rounds=384),
    "bud768": lambda: LiveConfig(confirm_budget_rounds=768),
    "bud1536": lambda: LiveConfig(confirm_budget_rounds=1536),
    "bud3072": lambda: LiveConfig(confirm_budget_rounds=3072),
    "bud6144": lambda: LiveConfig(confirm_budget_rounds=6144),
    # session 10 (helper age10): within the budget the groups that waited longest first
    # (netcheck.analysis.confirm_budget "Why aging"); "noage" = strongest first only,
    # the order before it (the baseline)
    "noage": lambda: LiveConfig(confirm_aging=False),
    # session 12: the mutual test's nomination floor at the benign bound log 1.2 (and
    # log 1.15) instead of the confirmation's log 1.25; confirmation keeps its floor test
    "nf20": lambda: LiveConfig(detector=DetectorConfig(effect_floor=math.log(1.2))),
    "nf15": lambda: LiveConfig(detector=DetectorConfig(effect_floor=math.log(1.15))),
    # session 12: only the mutual test's nomination floor at log 1.2; its BH family and
    # the other detectors keep log 1.25 (DetectorConfig.mutual_nominate_floor)
    "mf20": lambda: LiveConfig(detector=DetectorConfig(mutual_nominate_floor=math.log(1.2))),
    # session 13: the deadline calibrated as the product does (derive_deadline of the
    # honest alone times, coupling allowance 0.2): the default since session 13; "s12" =
    # the legacy constants before (a 1.5, b 1.2, slack 0.5 s), the end of session 12
    "derived": lambda: LiveConfig(deadline_rule="derived"),
    "s12": lambda: LiveConfig(deadline_rule="legacy"),
    # ... and calibrated on one trusted card of the class (speed 1, median noise)
    "card": lambda: LiveConfig(deadline_rule="card"),
}


def seed_secret(seed: int) -> bytes:
    """The schedule secret of run ``seed``: 32 bytes of ``seed`` below 256 (the secrets of
    every run measured so far), SHA-256 of its decimal text from 256 on (``bytes([seed])``
    stopped the false-flag runs there)."""
    if 0 <= seed < 256:
        return bytes([seed]) * 32
    return hashlib.sha256(f"netcheck benchmark seed {seed}".encode()).digest()


def run_scenario(
    sc: Scenario, config: str, seeds: int, first_seed: int = 0, max_rounds: int | None = None
) -> list[dict[str, Any]]:
    """``seeds`` runs of one scenario (seeds ``first_seed``...); one aggregated row per
    round count of :data:`ROUNDS` (those up to ``max_rounds``: a shorter run)."""
    cfg = CONFIGS[config]()
    cps = tuple(r for r in ROUNDS if max_rounds is None or r <= max_rounds)
    per_r: dict[int, list[dict[str, Any]]] = {r: [] for r in cps}
    for seed in range(first_seed, first_seed + seeds):
        pop = make_population(sc.spec, np.random.default_rng([seed, 1]))
        sim = LiveSimulation(pop, cfg, np.random.default_rng([seed, 2]), secret=seed_secret(seed))
        for snap in sim.run(cps):
            per_r[snap.rounds].append(score(pop, snap))
    rows = []
    for r, runs in per_r.items():
        row: dict[str, Any] = {"scenario": sc.name, "config": config, "rounds": r,
                               "seeds": seeds}  # fmt: skip
        for key in ("FF", "mixed", "capH", "slH", "an"):
            row[key] = int(sum(x[key] for x in runs))
        row["HS"] = float(np.mean([x["HS"] for x in runs]))
        row["conf"] = float(np.mean([x["conf"] for x in runs]))
        for k in SIZES:
            for what in ("found", "caught", "c0"):
                hits = [h for x in runs for h in x[f"{what}{k}"]]
                row[f"{what}{k}"] = float(np.mean(hits)) if hits else float("nan")
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """Fixed-width text table."""
    head = (f"{'scenario':<28} {'cfg':<3} {'R':>4} | {'found k=2':>9} {'k=3':>5} {'k=5':>5} | "
            f"{'caught k=2':>10} {'k=3':>5} {'k=5':>5} {'c-0':>5} | {'FF':>3} {'mix':>3} "
            f"{'HS':>5} {'capH':>4} {'slH':>4} {'conf':>6} {'an':>4}")  # fmt: skip
    lines = [head, "-" * len(head)]
    last = None
    for r in rows:
        if last is not None and (r["scenario"], r["config"]) != last:
            lines.append("")
        last = (r["scenario"], r["config"])
        lines.append(
            f"{r['scenario']:<28} {r['config']:<3} {r['rounds']:>4} | "
            f"{r['found2']:>9.2f} {r['found3']:>5.2f} {r['found5']:>5.2f} | "
            f"{r['caught2']:>10.2f} {r['caught3']:>5.2f} {r['caught5']:>5.2f} "
            f"{r['c02']:>5.2f} | {r['FF']:>3} {r['mixed']:>3} {r['HS']:>5.1f} {r['capH']:>4} "
            f"{r['slH']:>4} {r['conf']:>6.0f} {r['an']:>4}"
        )
    return "\n".join(lines)


def g1_rounds(full_every: int = 4, level: float = 0.95, q: float | None = None) -> int:
    """The first checkpoint whose screening rounds give ``pair_coverage >= level`` at
    load probability ``q`` (None: the coordinator's default)."""
    q = LiveConfig().load_probability if q is None else q
    det = DetectorConfig()
    m, one_way = det.mutual_min_rounds, det.mutual_one_way
    return next(r for r in ROUNDS if pair_coverage(r - r // full_every, m, q, one_way) >= level)


def goals(
    rows: list[dict[str, Any]], scs: list[Scenario], config: str
) -> list[tuple[str, bool | None, str]]:
    """The four goals of the module docstring, for one config: (goal, met, detail);
    met is None when the run has no scenario the goal applies to (a split run).

    Each goal's detail ends with its value *before* the slowness test (G2-G4: the same
    run without it; G1: the issue's wording, 16 rounds, then the rounds of any kind run
    by the checkpoint: the goal's unit is screening rounds, the coordinator's time goes
    to confirmation rounds too)."""
    by = {(r["scenario"], r["rounds"]): r for r in rows if r["config"] == config}
    out: list[tuple[str, bool | None, str]] = []
    r1 = g1_rounds()
    grid = [s for s in scs if s.grid and (s.name, r1) in by]
    bad = [f"{s.name} {by[(s.name, r1)]['found2']:.2f}" for s in grid
           if not by[(s.name, r1)]["found2"] >= 0.95]  # fmt: skip
    # beside the goal: 16 rounds (the issue's wording) or, when the goal is at 16, the
    # 32 rounds at which sessions 3-8 checked it
    r2 = 32 if r1 == 16 else 16
    at16 = [f"{s.name} {by[(s.name, r2)]['found2']:.2f}" for s in grid
            if (s.name, r2) in by and not by[(s.name, r2)]["found2"] >= 0.95]  # fmt: skip
    # the coverage of the config's own schedule and mutual test (s9: q 1/2, 0.968)
    live = CONFIGS[config]() if config in CONFIGS else LiveConfig()
    q, m = live.load_probability, live.detector.mutual_min_rounds
    one_way = live.detector.mutual_one_way
    cov = pair_coverage(16 - 16 // live.full_every, m, q, one_way)
    # the goal counts screening rounds; confirmation rounds run in between (wall time)
    run = [r1 + by[(s.name, r1)]["conf"] for s in grid]
    spent = f"{min(run):,.0f}-{max(run):,.0f}" if run else "-"
    out.append((
        f"G1 plain/jitter pairs found >= 0.95 by {r1} rounds ({r1 - r1 // 4} screening, "
        f"pair coverage {pair_coverage(r1 - r1 // 4, m, q, one_way):.3f}; at 16 rounds "
        f"coverage caps "
        f"recall at {cov:.3f})", (not bad) if grid else None,
        f"{'; '.join(bad) or 'all cells'} | at {r2} rounds: {'; '.join(at16) or 'all cells'}"
        f" | rounds run by {r1} counting confirmation rounds: {spent} per population",
    ))  # fmt: skip
    cls = [s for s in scs if s.claimed_class and s.spec.farm_sizes and (s.name, 32) in by]
    for key, label in (("caught", ""), ("c0", "before: ")):
        bad = [f"{s.name} k={k} {by[(s.name, 32)][f'{key}{k}']:.2f}" for s in cls
               for k in SIZES
               if by[(s.name, 32)][f"{key}{k}"] == by[(s.name, 32)][f"{key}{k}"]
               and by[(s.name, 32)][f"{key}{k}"] < 1.0]  # fmt: skip
        if not label:
            detail, met = "; ".join(bad) or "all", (not bad) if cls else None
        else:
            detail += f" | {label}{'; '.join(bad) or 'all'}"
    out.append(("G2 claimed-class farms caught by 32 rounds", met, detail))
    bad = []
    for s in scs:
        for what in ("found", "caught"):
            for k in SIZES:
                seq = [by[(s.name, r)][f"{what}{k}"] for r in ROUNDS if (s.name, r) in by]
                if any(b < a - 1e-12 for a, b in zip(seq, seq[1:], strict=False)):
                    bad.append(f"{s.name} {what} k={k}")
    out.append(("G3 recall never falls as rounds grow", not bad, "; ".join(bad) or "none falls"))
    last = [r for r in rows if r["config"] == config and r["rounds"] == max(ROUNDS)]
    ff, sl, cap = (sum(r[key] for r in last) for key in ("FF", "slH", "capH"))
    an = sum(r["an"] for r in last)
    out.append((
        "G4 zero confirmed false flags (shared-backend, slow, capacity) over >= 1,000 analyses",
        (ff == 0 and sl == 0 and cap == 0 and an >= 1000) if last else None,
        f"{ff} honest in shared-backend flags, {sl} honest slow flags, {cap} honest capacity "
        f"flags over {an} analyses | before: {ff} shared-backend, {cap} capacity",
    ))  # fmt: skip
    return out


def shipped_class(rows: list[dict[str, Any]], scs: list[Scenario], config: str) -> list[str]:
    """The goals' quantities on the measured H200 class alone (the ``h200 ...``
    scenarios), as lines to print. The issue's grid does not contain the class the
    product ships (and the capacity gate refuses the grid's classes); its farms and
    analyses count in G2-G4 like every library scenario's, not in G1 (not grid cells).
    Empty when the run has none of them."""
    by = {(r["scenario"], r["rounds"]): r for r in rows if r["config"] == config}
    h200 = [s for s in scs if s.name.startswith("h200 ")]
    if not any((s.name, 16) in by for s in h200):
        return []
    found = [f"{s.name} {by[(s.name, 16)]['found2']:.2f}" for s in h200
             if s.adversary in ("plain", "jitter") and (s.name, 16) in by]  # fmt: skip
    caught = [f"{s.name} k={k} {by[(s.name, 32)][f'caught{k}']:.2f}" for s in h200
              if s.spec.farm_sizes and (s.name, 32) in by for k in SIZES
              if by[(s.name, 32)][f"caught{k}"] == by[(s.name, 32)][f"caught{k}"]]  # fmt: skip
    r_last = max(r for s in h200 for r in ROUNDS if (s.name, r) in by)
    last = [by[(s.name, r_last)] for s in h200 if (s.name, r_last) in by]
    ff, sl, cap, an = (sum(r[key] for r in last) for key in ("FF", "slH", "capH", "an"))
    return [
        f"plain/jitter pairs found by 16 rounds: {'; '.join(found) or '-'}",
        f"farms caught by 32 rounds: {'; '.join(caught) or '-'}",
        f"honest nodes flagged by {r_last} rounds: {ff} shared-backend, {sl} slow, "
        f"{cap} capacity, over {an} analyses",
    ]


def print_goals(rows: list[dict[str, Any]], scs: list[Scenario], configs: tuple[str, ...]) -> bool:
    """Print the goals of each config (MET / MISS, detail) and, where the run has them,
    the same quantities on the measured H200 class (:func:`shipped_class`); True when
    ``new`` misses a goal."""
    missed = False
    for config in configs:
        print(f"\ngoals [{config}]:")
        for name, ok, detail in goals(rows, scs, config):
            status = "N/A " if ok is None else ("MET " if ok else "MISS")
            print(f"  {status} {name}: {detail}")
            missed |= config == "new" and ok is False
        lines = shipped_class(rows, scs, config)
        if lines:
            print(
                f"measured H200 class [{config}] (beside the issue's grid: in G2-G4 above, not in G1):"
            )
            for line in lines:
                print(f"  {line}")
    return missed


COUNTS = ("FF", "mixed", "capH", "slH", "an")
RATES = ("HS", "conf", *(f"{w}{k}" for k in SIZES for w in ("found", "caught", "c0")))


def merge_rows(
    rows: list[dict[str, Any]], counts: Sequence[str] = COUNTS, rates: Sequence[str] = RATES
) -> list[dict[str, Any]]:
    """Rows of one (scenario, config, rounds) from runs over different seeds, as one:
    ``counts`` summed, ``rates`` (and means) weighted by seeds, NaN ignored (first-seen
    order kept)."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["config"], r["rounds"]), []).append(r)
    out = []
    for parts in groups.values():
        row = dict(parts[0])
        row["seeds"] = sum(p["seeds"] for p in parts)
        for key in counts:
            row[key] = int(sum(p[key] for p in parts))
        for key in rates:
            vals = [(p[key], p["seeds"]) for p in parts if p.get(key, math.nan) == p.get(key)]
            row[key] = sum(v * w for v, w in vals) / sum(w for _, w in vals) if vals else math.nan
        out.append(row)
    return out


def markdown(rows: list[dict[str, Any]], base: str = "s3") -> str:
    """The ``new`` rows as a Markdown table, with the ``base`` config's found and caught
    (farms of 2) and confirmation rounds of the same scenario and round count beside
    them (docs/detection.md)."""

    def f3(r: dict[str, Any], what: str) -> str:
        return " / ".join("–" if r[f"{what}{k}"] != r[f"{what}{k}"] else f"{r[f'{what}{k}']:.2f}"
                          for k in SIZES)  # fmt: skip

    by = {(r["scenario"], r["rounds"]): r for r in rows if r["config"] == base}
    out = [
        f"| scenario | R | found k=2 / 3 / 5 | caught k=2 / 3 / 5 | {base}: found / caught k=2 "
        f"| FF | slH | capH | HS | conf ({base}) | an |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    last = None
    for r in rows:
        if r["config"] != "new":
            continue
        b = by.get((r["scenario"], r["rounds"]))
        fb = (
            "–"
            if b is None or b["found2"] != b["found2"]
            else f"{b['found2']:.2f} / {b['caught2']:.2f}"
        )
        cb = "" if b is None else f" ({b['conf']:.0f})"
        name = r["scenario"] if r["scenario"] != last else ""
        last = r["scenario"]
        out.append(f"| {name} | {r['rounds']} | {f3(r, 'found')} | {f3(r, 'caught')} | {fb} | "
                   f"{r['FF']} | {r['slH']} | {r['capH']} | {r['HS']:.1f} | {r['conf']:.0f}{cb} | "
                   f"{r['an']} |")  # fmt: skip
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """Small multiples, one panel per farm scenario: farms of 2 found (contention) and
    caught (anything) against screening rounds, each config its own line style; saved
    to ``path`` (PNG or SVG by its suffix). Without a farm scenario (e.g. only the
    false-flag populations) there is nothing to draw: it says so and writes nothing."""
    from matplotlib.figure import Figure

    names = list(dict.fromkeys(r["scenario"] for r in rows if r["found2"] == r["found2"]))
    if not names:
        print(f"no farm scenario in these rows: no plot written to {path}")
        return
    configs = sorted(dict.fromkeys(r["config"] for r in rows), key=lambda c: c != "new")
    cols = 5
    fig = Figure(figsize=(3.0 * cols, 2.3 * (-(-len(names) // cols))), layout="constrained")
    axes = fig.subplots(-(-len(names) // cols), cols, squeeze=False, sharex=True, sharey=True)
    styles = {c: s for c, s in zip(configs, ("-", "--", ":", "-."), strict=False)}
    for ax, name in zip(axes.flat, names, strict=False):
        for config in configs:
            mine = sorted((r for r in rows if r["scenario"] == name and r["config"] == config),
                          key=lambda r: r["rounds"])  # fmt: skip
            xs = [r["rounds"] for r in mine]
            for key, color in (("found2", "#0072B2"), ("caught2", "#D55E00")):
                ax.plot(xs, [r[key] for r in mine], styles.get(config, "-"), color=color,
                        marker=".", label=f"{key[:-1]} k=2 [{config}]")  # fmt: skip
        ax.axhline(0.95, color="grey", lw=0.5)
        ax.set_title(name, fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(ROUNDS), [str(r) for r in ROUNDS])
        ax.set_ylim(-0.05, 1.05)
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4, fontsize=8)
    fig.suptitle("EMULATION: farms of 2 found / caught vs screening rounds (grey: 0.95)")
    fig.savefig(path, dpi=110)


def report_json(
    paths: list[str], scs: list[Scenario], check: bool, plot_path: str | None = None,
    md: bool = False,
) -> int:  # fmt: skip
    """Table and goals over the rows of several ``--json`` files (``--from-json``); rows
    of one scenario split over seeds are merged (:func:`merge_rows`)."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        with open(path) as fh:
            rows += json.load(fh)
    order = {sc.name: i for i, sc in enumerate(scs)}
    configs = tuple(sorted(dict.fromkeys(r["config"] for r in rows), key=lambda c: c != "new"))
    rows = sorted(merge_rows(rows), key=lambda r: (order.get(r["scenario"], len(order)),
                                                   configs.index(r["config"]), r["rounds"]))  # fmt: skip
    names = {r["scenario"] for r in rows}
    print(
        f"EMULATION — netcheck detection benchmark, rows of {len(paths)} runs: "
        + (", ".join(paths) if len(paths) <= 8 else f"{paths[0]} ... {paths[-1]}")
    )
    print(table(rows))
    missed = print_goals(rows, [s for s in scs if s.name in names], configs)
    if plot_path:
        plot(rows, plot_path)
    if md:
        print("\n" + markdown(rows, next((c for c in configs if c != "new"), "s3")))
    return 1 if (missed and check) else 0


def main() -> int:
    """Parse arguments, run, print the table and the goals; exit 1 if a goal is missed
    (only with ``--check``)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--ff-seeds", type=int, default=125, help="runs of the false-flag scenario")
    parser.add_argument(
        "--ff-sigma",
        default="0.05,0.15",
        help="timing noise of the false-flag scenarios (one per value)",
    )
    parser.add_argument("--quick", action="store_true",
                        help="base + padded + false-flag scenarios, 1 seed")  # fmt: skip
    parser.add_argument("--old", action="store_true", help="also the pre-issue-13 config")
    parser.add_argument("--old-only", action="store_true", help="only the pre-issue-13 config")
    parser.add_argument("--tukey", action="store_true",
                        help="also the current config with Tukey's polish (tky)")  # fmt: skip
    parser.add_argument("--library", action="store_true", help="adversary library only, no grid")
    parser.add_argument(
        "--only", default=None, help="scenarios whose name contains this (alternatives split by |)"
    )
    parser.add_argument("--skip", default=None, help="leave out scenarios whose name contains this")
    parser.add_argument("--scenario", action="append", default=None, metavar="NAME",
                        help="only the scenario of exactly this name (repeatable)")  # fmt: skip
    parser.add_argument("--config", action="append", default=None, choices=sorted(CONFIGS),
                        help="run these configs instead (repeatable; s3 / s4 = before session 4 / 5)")  # fmt: skip
    parser.add_argument(
        "--part",
        default=None,
        metavar="I/N",
        help="only the I-th of N round-robin parts of the scenarios",
    )
    parser.add_argument("--first-seed", type=int, default=0,
                        help="first seed of every scenario (to split seeds over processes)")  # fmt: skip
    parser.add_argument("--max-rounds", type=int, default=None, metavar="R",
                        help="stop every run at the last checkpoint <= R (16, 32, 64 or 128)")  # fmt: skip
    parser.add_argument("--speed-sd", type=float, default=None, metavar="SD",
                        help="cards' speed spread (log-sd) in every scenario instead of its "
                             "own (0.05; the h200 scenarios 0.01); scenario names get "
                             "' sp=SD' (give it with --from-json too)")  # fmt: skip
    parser.add_argument("--list", action="store_true",
                        help="print the names of the scenarios the other options select "
                             "(e.g. --only h200: the measured H200 class) and exit; the "
                             "false-flag scenarios (--ff-seeds) are not listed")  # fmt: skip
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument("--markdown", action="store_true",
                        help="with --from-json: also the table of new vs the other config in Markdown")  # fmt: skip
    parser.add_argument("--plot", default=None, metavar="PATH",
                        help="also draw found/caught vs rounds per scenario (PNG/SVG)")  # fmt: skip
    parser.add_argument("--from-json", nargs="+", default=None, metavar="PATH",
                        help="no runs: table and goals over the rows of these --json files "
                             "(a grid split over processes)")  # fmt: skip
    args = parser.parse_args()
    start = time.perf_counter()
    scs = scenarios()
    if args.from_json:
        ffs = [false_flag_scenario(x) for x in (0.05, 0.15)]
        scs = [at_speed(s, args.speed_sd) for s in [*scs, *ffs]]
        return report_json(args.from_json, scs, args.check, args.plot, args.markdown)
    seeds, ff_seeds = args.seeds, args.ff_seeds
    if args.quick:
        scs, seeds, ff_seeds = [s for s in scs if s.name in QUICK], 1, 2
    if args.library:
        scs = [s for s in scs if not s.name.startswith(("plain ", "jitter "))]
    if args.only:
        scs = [s for s in scs if any(part in s.name for part in args.only.split("|"))]
    if args.skip:
        scs = [s for s in scs if args.skip not in s.name]
    if args.scenario:
        scs = [s for s in scs if s.name in args.scenario]
    if args.part:
        i, n = (int(x) for x in args.part.split("/"))
        scs = scs[i - 1 :: n]
    scs = [at_speed(s, args.speed_sd) for s in scs]  # after the filters: they take the base names
    if args.list:
        print("\n".join(s.name for s in scs))
        return 0
    configs = ("new", "old") if args.old else (("old",) if args.old_only else ("new",))
    if args.tukey:
        configs = (*configs, "tky")
    if args.config:
        configs = tuple(args.config)
    rows: list[dict[str, Any]] = []
    for sc in scs:
        for config in configs:
            got = run_scenario(sc, config, seeds, args.first_seed, args.max_rounds)
            rows += got
            print(f"  {sc.name} [{config}] done ({time.perf_counter() - start:.0f} s)",
                  file=sys.stderr, flush=True)  # fmt: skip
            print(json.dumps(got), file=sys.stderr, flush=True)  # partial results as they come
    if ff_seeds:
        for ff in [at_speed(false_flag_scenario(float(x)), args.speed_sd)
                   for x in args.ff_sigma.split(",")]:  # fmt: skip
            for config in configs:
                rows += run_scenario(ff, config, ff_seeds, args.first_seed)
            scs = [*scs, ff]
    print(f"EMULATION — netcheck detection benchmark (live round mix), {seeds} seeds, "
          f"false-flag scenario {ff_seeds} runs")  # fmt: skip
    print(table(rows))
    missed = print_goals(rows, scs, configs)
    print(f"\n({time.perf_counter() - start:.0f} s)")
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(rows, fh, indent=1)
    if args.plot:
        plot(rows, args.plot)
    return 1 if (missed and args.check) else 0


if __name__ == "__main__":
    raise SystemExit(main())
