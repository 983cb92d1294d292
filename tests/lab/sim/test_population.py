"""Tests for netcheck.lab.sim.population: the emulated service-time model."""

from __future__ import annotations

import numpy as np
import pytest

from netcheck.analysis.timing import log_service_matrix
from netcheck.lab.sim.population import PopulationSpec, make_population

SPEC = PopulationSpec(n_nodes=20, farm_sizes=(2, 3), cohosted_pairs=2, sigma_w=0.0,
                      sigma_spread=0.0, speed_sd=0.0, round_sd=0.0)  # fmt: skip


def test_population_layout_is_seeded() -> None:
    """Farms, co-hosts and keys are drawn from the seed, reproducibly."""
    a = make_population(SPEC, np.random.default_rng(1))
    b = make_population(SPEC, np.random.default_rng(1))
    assert a.farms == b.farms and [len(f) for f in a.farms] == [2, 3]
    assert len(a.honest) == 15 and len(a.cohosted()) == 2


def test_farm_slowdown_follows_the_model() -> None:
    """Noiseless: a farm member takes T*(1 + beta*(k_loaded - 1)); honest ones take T."""
    pop = make_population(SPEC, np.random.default_rng(2))
    idx = {k: i for i, k in enumerate(pop.node_keys)}
    loaded = np.zeros(20, dtype=bool)
    loaded[[idx[k] for k in pop.farms[1]]] = True
    s = pop.service_times(loaded, np.random.default_rng(0))
    assert s[idx[pop.farms[1][0]]] == pytest.approx(2.0 * (1 + 0.5 * 2))
    assert np.isnan(s[idx[pop.farms[0][0]]])


def test_rows_have_coordinator_shape() -> None:
    """Rows give back the service time after subtracting the measured RTT."""
    pop = make_population(SPEC, np.random.default_rng(3))
    rows = pop.simulate_round("r0", np.ones(20, dtype=bool), np.random.default_rng(4))
    mat = log_service_matrix(rows, pop.node_keys, ["r0"])
    honest = [i for i, k in enumerate(pop.node_keys) if k in pop.honest and pop.cohost_of[i] < 0]
    assert np.allclose(np.exp(mat.y[honest, 0]), 2.0, atol=0.02)


def test_selective_adversary_drops_when_coloaded() -> None:
    """The selective farm returns nothing when two identities are loaded."""
    spec = PopulationSpec(n_nodes=20, farm_sizes=(2,), cohosted_pairs=0, adversary="selective")
    pop = make_population(spec, np.random.default_rng(5))
    s = pop.service_times(np.ones(20, dtype=bool), np.random.default_rng(6))
    assert np.isnan(s[pop.farm_of >= 0]).all() and np.isfinite(s[pop.farm_of < 0]).all()
