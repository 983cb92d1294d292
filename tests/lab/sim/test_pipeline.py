"""Tests for netcheck.lab.sim.pipeline: screening end to end on a small population."""

from __future__ import annotations

import numpy as np

from netcheck.lab.sim.pipeline import PipelineConfig, run_screening
from netcheck.lab.sim.population import PopulationSpec, make_population


def test_small_population_farms_found_and_honest_cleared() -> None:
    """60 nodes, farms of 2 and 3, 64 rounds: both found, no honest node flagged."""
    spec = PopulationSpec(n_nodes=60, farm_sizes=(2, 3), cohosted_pairs=4)
    rng = np.random.default_rng(11)
    pop = make_population(spec, rng)
    report = run_screening(pop, 64, PipelineConfig(), rng)
    assert report.metrics.found_by_size == {2: (1, 1), 3: (1, 1)}
    assert report.metrics.false_flags == ()


def test_all_honest_population_has_no_flags() -> None:
    """No farms: no confirmed group and no false flag."""
    spec = PopulationSpec(n_nodes=60, farm_sizes=(), cohosted_pairs=10)
    rng = np.random.default_rng(12)
    report = run_screening(make_population(spec, rng), 64, PipelineConfig(), rng)
    assert all(c.verdict == "cleared" for c in report.confirmations)
    assert report.metrics.false_flags == ()


def test_two_identities_on_one_backend_are_found() -> None:
    """n = 2, one farm of 2: the pipeline's rounds are all screening rounds (no full
    round), so the both-loaded rounds (the contention arm itself) must stay in the
    detector's input; dropping every all-loaded round (``detect`` without
    ``full_rounds``) left the pair untestable (session 9's fix, in the lab pipeline)."""
    spec = PopulationSpec(n_nodes=2, farm_sizes=(2,), cohosted_pairs=0)
    rng = np.random.default_rng(13)
    report = run_screening(make_population(spec, rng), 32, PipelineConfig(), rng)
    assert report.metrics.screened_by_size == {2: (1, 1)}
    assert report.metrics.found_by_size == {2: (1, 1)}
