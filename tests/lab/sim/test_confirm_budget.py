"""The simulator's confirmation budget per analysis (netcheck.analysis.confirm_budget),
as the coordinator's: strongest groups first, the budget respected, an unserved group
spends no attempt. The coordinator side, and both choosing the same work:
tests/coordinator/test_confirm_batches.py."""

from __future__ import annotations

import math

import numpy as np

from netcheck.analysis.confirm_run import prior_attempts
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


def run_budget_case(budget: int) -> tuple[list[set[str]], int, int, list[tuple[str, ...]]]:
    """The three :func:`budget_groups` confirmed by the simulator with ``budget``
    (3 / 6 cycles: a pair's first look is 9 rounds). Returns the groups started (as
    role sets), the confirmation rounds, the unserved count, and the attempts recorded
    (member tuples, as roles)."""
    pop = make_population(SPEC, np.random.default_rng(5))
    farm = sorted(pop.farms[0])
    honest = sorted(pop.honest)
    role = {"a": farm[0], "b": farm[1], "c": honest[0], "d": honest[1]}
    back = {k: r for r, k in role.items()}
    cfg = LiveConfig(confirm_cycles=3, confirm_max_cycles=6, confirm_budget_rounds=budget,
                     confirm_coins=False)  # fmt: skip
    sim = LiveSimulation(pop, cfg, np.random.default_rng(6))
    started = sim._confirm(budget_groups(role), [], "sim/budget")
    st = sim.state
    return ([{back[k] for k in g} for g in started], st.confirmation_rounds, st.unserved,
            [tuple(sorted(back[k] for k in g)) for g in st.tested])  # fmt: skip


def test_budget_serves_the_strongest_groups_first_and_bounds_the_rounds() -> None:
    """Budget 9: the farm a-b and the honest c-d share one 9-round step (strongest
    first); c-a, listed first by the detector and the largest z, but at the floor,
    waits and is left unserved: no round, no recorded attempt. Without a budget it
    runs after them."""
    started, rounds, unserved, tested = run_budget_case(9)
    assert started == [{"a", "b"}, {"c", "d"}]
    assert rounds == 9 and unserved == 1
    assert prior_attempts(("a", "c"), tested) == 0  # no attempt consumed
    assert prior_attempts(("a", "b"), tested) == 1 and prior_attempts(("c", "d"), tested) == 1

    started, rounds, unserved, tested = run_budget_case(0)
    assert started[:2] == [{"a", "b"}, {"c", "d"}] and {"a", "c"} in started
    assert rounds > 9 and unserved == 0 and prior_attempts(("a", "c"), tested) == 1


def test_a_run_the_budget_stops_leaves_its_attempt() -> None:
    """Budget 12: the first step (9 rounds) fits, a second 9-round look does not: a run
    still going is stopped and recorded (cleared, its attempt counted), as a coordinator
    run whose member left; the rounds never exceed the budget."""
    started, rounds, unserved, tested = run_budget_case(12)
    assert rounds == 9 <= 12 and unserved == 1
    assert sorted(tested) == [("a", "b"), ("c", "d")]
