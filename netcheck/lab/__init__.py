"""LAB code: demo, load generation, labelled emulation, demo adversaries, the simulation
harness, sample dashboard data and in-process test helpers.

Everything here exists to show, measure or test netcheck on one machine. The real node
(``netcheck node run`` without lab options) and the coordinator never import it; only the
CLI (the top layer), scripts, benchmarks and tests do. tests/test_layers.py checks this.
"""
