"""The same small scenario through a live coordinator and through the simulator gives
the same flags.

Live: a real in-process coordinator on loopback, real signed/encrypted websocket
sessions, the real screening, analysis and confirmation (``Screening.run``); the nodes'
GPU service time is EMULATED (:class:`~netcheck.lab.emulation.EmulatedGPU`): four
honest nodes with a 0.3 s GPU each, two identities sharing ONE 0.2 s GPU (beta = 1), so
each identity meets the 0.65 s deadline even when both are loaded: only the contention
test can find them. Simulator: :class:`~netcheck.lab.sim.live.LiveSimulation` on the same
scenario (same profile, the same service-time model).

Rounds: 64 (48 screening rounds; every 4th is a full round). The pair is co-loaded in a
screening round with probability 1/4, so the design alone can starve the detector: with
16 rounds (12 screening) P(fewer than 2 co-loaded rounds) = P(Binomial(12, 1/4) < 2)
= 0.16, and the whole check failed in 119 of 400 simulated runs; with 32 rounds in 5 of
400. With 48 screening rounds P(Binomial(48, 1/4) < 2) = 1.6e-5, and the screening
missed the pair in 1 of 20,000 random schedules of this scenario (noiseless, as the
emulated GPUs are: 5e-5, 95% upper bound 2.4e-4; ``median_polish`` + ``detect`` on
random schedules); the simulated check failed in 0 of 400 runs at 48 and at 64 rounds.
Computed failure rate: about 5e-5 (< 1e-3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from netcheck.config import DeadlineParams
from netcheck.lab.adversary import PaddingWorker
from netcheck.lab.emulation import EmulatedGPU, EmulatedWorker
from netcheck.lab.sim.live import LiveConfig, LiveSimulation, Snapshot
from netcheck.lab.sim.population import PopulationSpec, make_population
from netcheck.lab.testing import (
    FAKE_FINGERPRINT,
    CanaryAnswering,
    canary_store,
    running_coordinator,
    small_profile,
)
from netcheck.records import Flag

pytestmark = pytest.mark.slow

T = 4
PROFILE = small_profile(
    "simlive", prompt_len=16, max_new_tokens=T,
    deadline=DeadlineParams(t_ref_s=0.3, a=1.5, slack_s=0.2), dispatch_timeout_s=10.0,
    result_timeout_s=10.0,
)  # fmt: skip
FP = FAKE_FINGERPRINT
ROUNDS = 64


def _roles(flags: list[tuple[str, str, frozenset[str]]], role: dict[str, str]) -> set[tuple[str, str, frozenset[str]]]:  # fmt: skip
    return {(kind, status, frozenset(role[k] for k in keys)) for kind, status, keys in flags}


async def _live(
    tmp_path: Path, proxies: dict[str, Any], rounds: int
) -> tuple[set[tuple[str, str, frozenset[str]]], list[Flag]]:
    """Four honest nodes (0.3 s EMULATED GPUs each) and ``proxies`` through ``rounds``
    screening rounds of a live coordinator: its flags (cleared records left out,
    members as roles) and every stored flag."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 2000)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        workers: dict[str, Any] = {
            f"honest-{i}": EmulatedWorker(CanaryAnswering(FP, T), EmulatedGPU(0.3))
            for i in range(4)
        }
        names = rc.start_named(workers | proxies, PROFILE.name)
        await rc.wait_connected(len(names))
        await rc.coord.screening.run(PROFILE.name, rounds)
        stored = rc.coord.screening.flags.list_flags(limit=100)
    role = {key: name.split("-")[0] for name, key in names.items()}
    live = _roles([(f.kind, f.status, frozenset(f.node_keys)) for f in stored
                   if f.status != "cleared"], role)  # fmt: skip
    return live, stored


def _simulated(spec: PopulationSpec, rounds: int) -> tuple[set[tuple[str, str, frozenset[str]]], Snapshot]:  # fmt: skip
    """The simulated run's flags (members as roles) and its snapshot, on PROFILE."""
    pop = make_population(spec, np.random.default_rng(1))
    sim = LiveSimulation(pop, LiveConfig(), np.random.default_rng(2), profile=PROFILE)
    snap = sim.run([rounds])[-1]
    sim_role = {k: ("honest" if k in pop.honest else "proxy") for k in pop.node_keys}
    flags = _roles(
        [("shared-backend", "confirmed", frozenset(f)) for f in snap.shared_flags]
        + [("capacity", "confirmed", frozenset({k})) for k in snap.capacity]
        + [("slow", "confirmed", frozenset({k})) for k in snap.slow],
        sim_role,
    )
    return flags, snap


async def test_live_and_simulated_screening_raise_the_same_flags(tmp_path: Path) -> None:
    """64 screening rounds + analyses + confirmation: live and simulated flags agree
    (one shared-backend flag on the pair, nothing on honest nodes, no capacity or slow
    flag)."""
    shared = EmulatedGPU(0.2, beta=1.0)
    proxies = {f"proxy-{x}": EmulatedWorker(CanaryAnswering(FP, T), shared) for x in "ab"}
    live, _stored = await _live(tmp_path, proxies, ROUNDS)

    spec = PopulationSpec(
        n_nodes=6, farm_sizes=(2,), cohosted_pairs=0, sigma_w=0.02, sigma_spread=0.0,
        beta=1.0, t_ref_s=0.3, speed_sd=0.0, round_sd=0.01, rtt_min_s=0.0005,
        rtt_max_s=0.002, backend_speedup=1.5,
    )  # fmt: skip
    simulated, _snap = _simulated(spec, ROUNDS)
    want = {("shared-backend", "confirmed", frozenset({"proxy"}))}
    assert live == want
    assert simulated == want


#: 64 rounds (48 screening): each identity needs 8 loaded screening rounds for the
#: slowness test that nominates it (at load probability 1/2, 48 rounds gave
#: P(Binomial(36, 1/2) < 8) = 1e-4 per identity); at load probability 2/3 the alone
#: nomination's floor is 1.237, so the pair's margin above it is small: with seeds 0-19
#: the simulated pair at 1.245 t_ref was flagged in 19 of 20 runs of 48 rounds, 20 of 20
#: of 64 (1.24 t_ref: 12 of 20 at 48).
PAD_ROUNDS = 64


async def test_live_and_simulated_padding_pair_is_flagged_slow_alone(tmp_path: Path) -> None:
    """A padding pair held to 1.245 t_ref on one card (beta 0.245): above the alone floor
    (1.2) and the alone nomination's floor at load probability 2/3 (1.237,
    ``alone.nominate_floor``), below the screening floor (1.25), within the deadline, no
    contention: both
    live and simulated runs raise slow flags on the pair only (judged on rounds that
    load each identity alone), nothing else, in 64 rounds. The simulated noise is the
    emulated GPU's (5 ms ticks on 0.3 s: about 1%)."""
    shared = EmulatedGPU(0.3, beta=0.245)
    proxies = {
        f"proxy-{x}": PaddingWorker(EmulatedWorker(CanaryAnswering(FP, T), shared), 0.3735)
        for x in "ab"
    }
    live, stored = await _live(tmp_path, proxies, PAD_ROUNDS)

    spec = PopulationSpec(
        n_nodes=6, farm_sizes=(2,), cohosted_pairs=0, sigma_w=0.01, sigma_spread=0.0,
        beta=0.245, t_ref_s=0.3, speed_sd=0.0, round_sd=0.003, rtt_min_s=0.0005,
        rtt_max_s=0.002, adversary="pad",
    )  # fmt: skip
    simulated, snap = _simulated(spec, PAD_ROUNDS)
    want = {("slow", "confirmed", frozenset({"proxy"}))}
    assert live == want
    assert simulated == want
    assert (
        len(snap.slow) == 2
        and sum(f.kind == "slow" and f.status == "confirmed" for f in stored) == 2
    )
