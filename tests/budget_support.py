"""Shared by tests/lab/sim/test_sim_confirm_budget.py and
tests/coordinator/test_confirm_batches.py: three nominations by role and the
simulator's confirmation of them under a budget (the coordinator test checks that it
chooses the same work)."""

from __future__ import annotations

import math

import numpy as np

from netcheck.analysis.detector_config import Edge, SuspectGroup
from netcheck.lab.sim.live import LiveConfig, LiveSimulation
from netcheck.lab.sim.population import PopulationSpec, make_population

FLOOR = math.log(1.25)
SPEC = PopulationSpec(n_nodes=4, farm_sizes=(2,), cohosted_pairs=0, beta=1.0, sigma_w=0.02)


def budget_groups(role: dict[str, str]) -> list[SuspectGroup]:
    """Three nominations in detector order (keys by role a, b = farm; c, d honest): a
    weak c-a first (an honest node beside a farm member, estimate just above the floor),
    the farm a-b (far above it), an honest c-d in between. Strength order: a-b, c-d,
    c-a; a-b and c-d are disjoint (one step of shared rounds), c-a must wait for both."""

    def group(x: str, y: str, z: float, effect: float) -> SuspectGroup:
        a, b = sorted((role[x], role[y]))
        return SuspectGroup((a, b), (Edge(a, b, "A-mutual", z, math.inf, 1e-6, 1e-3, effect,
                                          FLOOR, 16),))  # fmt: skip

    return [group("c", "a", 9.0, 0.24), group("a", "b", 6.0, 0.7), group("c", "d", 4.0, 0.4)]


def _budget_simulation(budget: int) -> tuple[LiveSimulation, dict[str, str], dict[str, str]]:
    """The simulator on SPEC's population with ``budget`` (3 / 6 cycles, coins off), the
    roles a, b (the farm) and c, d (honest) as node keys, and the way back."""
    pop = make_population(SPEC, np.random.default_rng(5))
    farm = sorted(pop.farms[0])
    honest = sorted(pop.honest)
    role = {"a": farm[0], "b": farm[1], "c": honest[0], "d": honest[1]}
    cfg = LiveConfig(confirm_cycles=3, confirm_max_cycles=6, confirm_budget_rounds=budget,
                     confirm_coins=False)  # fmt: skip
    return LiveSimulation(pop, cfg, np.random.default_rng(6)), role, {k: r for r, k in role.items()}


def run_budget_analyses(
    budget: int, analyses: int
) -> list[tuple[list[set[str]], set[frozenset[str]]]]:
    """The three :func:`budget_groups` nominated by ``analyses`` analyses in a row and
    confirmed by the simulator with ``budget`` (as :func:`run_budget_case`). Returns per
    analysis the groups started (role sets, in order) and the pairs waiting after it
    (role pairs)."""
    sim, role, back = _budget_simulation(budget)
    out = []
    for n in range(analyses):
        started = sim._confirm(budget_groups(role), [], f"sim/budget/{n}")
        waits = {frozenset(back[k] for k in p) for p, w in sim.state.waits.items() if w}
        out.append(([{back[k] for k in g} for g in started], waits))
    return out


def run_budget_case(budget: int) -> tuple[list[set[str]], int, int, list[tuple[str, ...]]]:
    """The three :func:`budget_groups` confirmed by the simulator with ``budget``
    (3 / 6 cycles: a pair's first look is 9 rounds). Returns the groups started (as
    role sets), the confirmation rounds, the unserved count, and the attempts recorded
    (member tuples, as roles)."""
    sim, role, back = _budget_simulation(budget)
    started = sim._confirm(budget_groups(role), [], "sim/budget")
    st = sim.state
    return ([{back[k] for k in g} for g in started], st.confirmation_rounds, st.unserved,
            [tuple(sorted(back[k] for k in g)) for g in st.tested])  # fmt: skip
