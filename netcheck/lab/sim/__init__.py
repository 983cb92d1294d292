"""SIMULATION HARNESS — emulated nodes and farms, for tests, benchmarks and demos.

Everything here is emulation: service times come from a documented model, not from a
GPU. It is never used for a real node. It produces the same timing rows the
coordinator stores, so the real detectors (:mod:`netcheck.analysis`) run on them.
"""

from netcheck.lab.sim.population import ADVERSARIES, Population, PopulationSpec, make_population

__all__ = ["ADVERSARIES", "Population", "PopulationSpec", "make_population"]
