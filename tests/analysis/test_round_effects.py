"""Regression tests: round effects must not absorb contention (small rounds, big farms)."""

from __future__ import annotations

import math

import numpy as np

from netcheck.analysis.detectors import DetectorConfig, detect
from netcheck.analysis.screening import analyse
from netcheck.analysis.timing import median_polish
from netcheck.records import StoredRounds

# A failing run of tests/lab/sim/test_sim_vs_live.py (main, 2026-11-30; kept in the
# integrator's notes as s2-simlive-fail.txt): 6 nodes, 24 screening rounds, emulated
# noiseless GPUs; log service time per node x round ("." = not loaded). proxy-a and
# proxy-b share one GPU (beta 1): -0.91 when both are loaded, -1.6 otherwise.
SAVED = {
    "proxy-a": ". -0.91 . . . -0.91 . -1.6 -0.91 . -0.91 -1.6 -1.6 -0.91 -1.6 . . -1.6 -1.6 . -0.91 . . -1.6",
    "honest-3": ". . . -1.2 . . -1.2 . -1.2 -1.2 . . -1.2 . -1.2 -1.2 -1.19 . -1.2 . -1.2 . . .",
    "honest-1": "-1.2 . . . . -1.2 . . -1.2 . . -1.2 . . -1.2 . -1.19 . . . -1.2 -1.2 . .",
    "proxy-b": ". -0.91 -1.6 -1.6 . -0.91 -1.6 . -0.91 . -0.91 . . -0.91 . . . . . -1.58 -0.91 -1.6 . .",
    "honest-0": "-1.19 . -1.2 . . . -1.2 -1.2 . . -1.2 -1.2 -1.2 . . -1.2 . -1.2 . . . -1.2 -1.2 -1.2",
    "honest-2": ". -1.2 . -1.2 -1.2 . . . . . . . -1.2 . -1.2 . . -1.2 -1.2 -1.2 -1.2 . -1.2 -1.2",
}  # fmt: skip


def _saved_rounds() -> StoredRounds:
    """The saved matrix as the coordinator stores it (release at 0, arrival = service)."""
    rids = tuple(f"r{r:02d}" for r in range(24))
    sched: dict[str, dict[str, bool]] = {r: {} for r in rids}
    rows = []
    for key, line in SAVED.items():
        for rid, cell in zip(rids, line.split(), strict=True):
            sched[rid][key] = cell != "."
            if cell != ".":
                arrived = round(math.exp(float(cell)) * 1e9)
                rows.append({"round_id": rid, "node_key": key, "released_ns": 0,
                             "arrived_ns": arrived, "rtt_s": 0.0, "commitment": "ab"})  # fmt: skip
    return StoredRounds(rids, dict.fromkeys(rids, "screening"), sched, tuple(rows))


def test_saved_live_failure_finds_the_shared_pair() -> None:
    """The saved failing live run: the analysis links proxy-a and proxy-b, nothing else."""
    got = analyse(_saved_rounds(), 0.65, DetectorConfig())
    pairs = {frozenset((e.a, e.b)) for e in got.detection.edges}
    assert pairs == {frozenset({"proxy-a", "proxy-b"})}
    assert [set(g.members) for g in got.detection.groups] == [{"proxy-a", "proxy-b"}]


def _farm_majority_rounds(seed: int, n: int, farm: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` nodes, nodes ``0..farm-1`` share one backend (beta 0.5), sigma 0.02,
    32 screening rounds; returns ``(y, loaded)``."""
    rng = np.random.default_rng(seed)
    loaded = rng.random((n, 32)) < 0.5
    y = rng.normal(0, 0.02, (n, 32)) + rng.normal(-1.2, 0.1, (n, 1))
    y[:farm] += np.log(1 + 0.5 * np.maximum(loaded[:farm].sum(axis=0) - 1, 0))
    y[~loaded] = np.nan
    return y, loaded


def test_a_farm_holding_half_of_a_rounds_cells_keeps_its_contention() -> None:
    """Small populations and big farms: when a farm makes up half of a round's loaded
    nodes, every pair of the farm is still linked and no two honest nodes are (Tukey's
    polish reads the farm's slowdown as the round's effect: the farm loses its edges
    and the honest nodes share the negative residuals)."""
    cfg = DetectorConfig()
    for seed, (n, farm) in enumerate([(6, 2), (6, 2), (8, 3), (8, 3), (12, 5), (12, 5)]):
        y, loaded = _farm_majority_rounds(seed, n, farm)
        keys = tuple(f"n{i}" for i in range(n))
        polish = median_polish(y, col_prior_cells=cfg.round_prior_cells)
        got = detect(polish.residuals, loaded, keys, cfg)
        pairs = {frozenset((e.a, e.b)) for e in got.edges}
        farm_pairs = {frozenset((keys[i], keys[j])) for i in range(farm) for j in range(i)}
        assert farm_pairs <= pairs, (seed, n, farm)
        assert all(keys.index(e.a) < farm or keys.index(e.b) < farm for e in got.edges)


def test_column_prior_shrinks_only_rounds_with_few_cells() -> None:
    """A common shift of every cell is removed in a round of 60 cells and left (as
    noise) in a round of 4: the penalty acts like 8 cells at 0; Tukey's polish (0)
    removes both."""
    rng = np.random.default_rng(3)
    y = rng.normal(0, 0.02, (60, 20))
    y[:, :2] += 0.5
    y[4:, 1] = np.nan
    pol = median_polish(y, col_prior_cells=8)
    assert pol.col_effects[0] - pol.col_effects[1] > 0.45
    assert abs(np.nanmedian(pol.residuals[:4, 1]) - 0.5) < 0.05
    tukey = median_polish(y)
    assert np.nanmax(np.abs(tukey.residuals)) < 0.1
