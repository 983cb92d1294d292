"""EMULATION: the screening pipeline end to end on a simulated population, with metrics.

``run_screening``: secret schedule -> timing rows -> ``y`` matrix -> median polish ->
detectors -> suspect groups -> confirmation rounds (simulated on the same population)
-> confirmed ``shared-backend`` groups, plus an emulated capacity (deadline) test in a
few full-load rounds. The analysis steps are the real ones from
:mod:`netcheck.analysis`; only the rows are simulated.

Metrics against the ground truth (:class:`Metrics`):

- a farm is **found** when one confirmed group has at least 2 confirmed members from
  that farm (then the analyst has proof that this farm's identities share a backend);
- **member recall**: fraction of farm identities that are confirmed members of a group
  together with another identity of their own farm;
- **false flags**: honest nodes that are confirmed members of any confirmed group;
  ``honest_suspects``: honest nodes in suspect groups *before* confirmation (cost, not
  harm: confirmation clears them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from netcheck.analysis.confirm import ConfirmationObservation, ConfirmConfig
from netcheck.analysis.confirm_run import ConfirmationRun
from netcheck.analysis.detectors import Detection, DetectorConfig, detect
from netcheck.analysis.schedule import screening_plan
from netcheck.analysis.timing import TimingRow, log_service_matrix, median_polish
from netcheck.lab.sim.population import Population


@dataclass(frozen=True)
class PipelineConfig:
    """Pipeline settings. Confirmation: :class:`ConfirmationRun` (the coordinator's
    driver) with ``confirm_cycles`` (4) and ``confirm_max_cycles`` (16).
    ``deadline_factor`` (3.0): a missing result is censored at
    ``deadline_factor * T_ref``; ``capacity_a`` (1.25) and ``full_load_rounds`` (5): a
    node fails the emulated capacity test when it exceeds ``capacity_a * T_ref`` in
    more than half of the full-load rounds."""

    detector: DetectorConfig = field(default_factory=DetectorConfig)
    confirm: ConfirmConfig = field(default_factory=ConfirmConfig)
    confirm_cycles: int = 4
    confirm_max_cycles: int = 16
    deadline_factor: float = 3.0
    capacity_a: float = 1.25
    full_load_rounds: int = 5


@dataclass(frozen=True)
class Screening:
    """Simulated screening rounds: the secret, round ids and raw rows."""

    secret: bytes
    round_ids: tuple[str, ...]
    rows: tuple[TimingRow, ...]

    def prefix(self, n_rounds: int) -> Screening:
        """The first ``n_rounds`` rounds only."""
        ids = self.round_ids[:n_rounds]
        keep = set(ids)
        return Screening(self.secret, ids, tuple(r for r in self.rows if r.round_id in keep))


@dataclass(frozen=True)
class Metrics:
    """Detection quality against the ground truth (see the module docstring).

    ``found_by_size``: farm size -> (farms found, farms); ``screened_by_size``: the same
    before confirmation (2+ members of the farm in one suspect group). ``false_flags``: honest keys
    confirmed; ``capacity_farms``: farms with an identity failing the capacity test;
    ``capacity_honest``: honest nodes failing it.
    """

    found_by_size: dict[int, tuple[int, int]]
    screened_by_size: dict[int, tuple[int, int]]
    member_recall: float
    false_flags: tuple[str, ...]
    honest_suspects: int
    suspect_groups: int
    confirmation_rounds: int
    capacity_farms: int
    capacity_honest: int


@dataclass(frozen=True)
class DetectionReport:
    """Everything one screening run produced, with metrics."""

    n_rounds: int
    detection: Detection
    confirmations: tuple[ConfirmationRun, ...]
    capacity_failed: tuple[str, ...]
    metrics: Metrics


def simulate_screening(
    population: Population, n_rounds: int, rng: np.random.Generator
) -> Screening:
    """EMULATION: ``n_rounds`` screening rounds under a fresh secret schedule."""
    secret = rng.bytes(32)
    round_ids = tuple(f"screen-{r:05d}" for r in range(n_rounds))
    rows: list[TimingRow] = []
    for r, rid in enumerate(round_ids):
        plan = screening_plan(secret, rid, population.node_keys)
        rows.extend(population.simulate_round(rid, plan, rng, start_ns=r * 10**11))
    return Screening(secret, round_ids, tuple(rows))


def confirm_members(
    population: Population, members: Sequence[str], cfg: PipelineConfig,
    rng: np.random.Generator, deadline_s: float,
) -> tuple[ConfirmationRun, int]:  # fmt: skip
    """EMULATION: one confirmation attempt of ``members`` as the coordinator runs it
    (:class:`ConfirmationRun`, ``cfg.confirm_cycles`` / ``confirm_max_cycles`` /
    ``confirm``), each round simulated by ``population`` and read as stored rows (a
    missing result censored at ``deadline_s``); returns the finished run and the rounds
    it took."""
    index = {k: i for i, k in enumerate(population.node_keys)}
    run = ConfirmationRun(tuple(members), cfg.confirm_cycles, cfg.confirm_max_cycles, cfg.confirm)
    spent = 0
    while not run.done:
        block = []
        for load in run.next_block():
            bits = np.zeros(len(population.node_keys), dtype=bool)
            bits[[index[k] for k in load]] = True
            rid = f"confirm-{spent:04d}"
            spent += 1
            rows = [row for row in population.simulate_round(rid, bits, rng) if row.loaded]
            keys = [row.node_key for row in rows]
            mat = log_service_matrix(rows, keys, [rid], deadline_s)
            values = dict(zip(keys, mat.y[:, 0].tolist(), strict=True))
            block.append(ConfirmationObservation(rid, frozenset(load), values))
        run.add(block)
    return run, spent


def _capacity(
    population: Population, cfg: PipelineConfig, rng: np.random.Generator
) -> tuple[str, ...]:
    """Emulated capacity test: all nodes loaded; strike = over ``capacity_a * T_ref``
    (a missing result is a strike)."""
    n = len(population.node_keys)
    limit = cfg.capacity_a * population.spec.t_ref_s
    strikes = np.zeros(n, dtype=np.int64)
    for _ in range(cfg.full_load_rounds):
        s = population.service_times(np.ones(n, dtype=bool), rng)
        strikes += ~(s <= limit)
    failed = strikes * 2 > cfg.full_load_rounds
    return tuple(k for k, f in zip(population.node_keys, failed, strict=True) if f)


def run_screening(
    population: Population,
    n_rounds: int,
    cfg: PipelineConfig,
    rng: np.random.Generator,
    screening: Screening | None = None,
) -> DetectionReport:
    """Screen ``population`` for ``n_rounds`` rounds, confirm suspects, score vs truth.

    ``screening``: reuse simulated rounds (its first ``n_rounds`` are used), so that
    several round counts can be compared on the same data.

    Raises:
        ValueError: if ``n_rounds < 1`` or ``screening`` has fewer rounds.
    """
    if n_rounds < 1:
        raise ValueError("n_rounds must be >= 1")
    if screening is None:
        screening = simulate_screening(population, n_rounds, rng)
    if len(screening.round_ids) < n_rounds:
        raise ValueError("screening has fewer rounds than n_rounds")
    screening = screening.prefix(n_rounds)
    deadline_s = cfg.deadline_factor * population.spec.t_ref_s
    keys = population.node_keys
    mat = log_service_matrix(screening.rows, keys, screening.round_ids, deadline_s)
    polish = median_polish(mat.y, col_prior_cells=cfg.detector.round_prior_cells)
    no_full = np.zeros(len(mat.round_ids), dtype=bool)  # screening rounds only, by rule
    detection = detect(polish.residuals, mat.loaded, keys, cfg.detector, mat.censored, no_full)
    results = []
    spent = 0
    for group in detection.groups:
        res, used = confirm_members(population, group.members, cfg, rng, deadline_s)
        results.append(res)
        spent += used
    capacity = _capacity(population, cfg, rng)
    metrics = score(population, detection, results, capacity, spent)
    return DetectionReport(n_rounds, detection, tuple(results), capacity, metrics)


def score(
    population: Population,
    detection: Detection,
    confirmations: Sequence[ConfirmationRun],
    capacity_failed: Sequence[str] = (),
    confirmation_rounds: int = 0,
) -> Metrics:
    """Metrics of one run against the population's ground truth (module docstring)."""
    farm_index = {key: f for f, farm in enumerate(population.farms) for key in farm}
    honest = population.honest
    found = [False] * len(population.farms)
    recalled: set[str] = set()
    false_flags: set[str] = set()
    for flag in (f for run in confirmations for f in run.flags):
        per_farm: dict[int, list[str]] = {}
        for key in flag:
            if key in honest:
                false_flags.add(key)
            elif key in farm_index:
                per_farm.setdefault(farm_index[key], []).append(key)
        for f, keys in per_farm.items():
            if len(keys) >= 2:
                found[f] = True
                recalled.update(keys)
    screened = [
        any(len(set(g.members) & set(farm)) >= 2 for g in detection.groups)
        for farm in population.farms
    ]
    by_size: dict[int, tuple[int, int]] = {}
    sc_size: dict[int, tuple[int, int]] = {}
    for f, farm in enumerate(population.farms):
        hit, total = by_size.get(len(farm), (0, 0))
        by_size[len(farm)] = (hit + found[f], total + 1)
        hit, total = sc_size.get(len(farm), (0, 0))
        sc_size[len(farm)] = (hit + screened[f], total + 1)
    n_farm_ids = sum(len(farm) for farm in population.farms)
    suspects = {k for g in detection.groups for k in g.members}
    cap = set(capacity_failed)
    return Metrics(
        found_by_size=dict(sorted(by_size.items())),
        screened_by_size=dict(sorted(sc_size.items())),
        member_recall=len(recalled) / n_farm_ids if n_farm_ids else math.nan,
        false_flags=tuple(sorted(false_flags)),
        honest_suspects=len(suspects & honest),
        suspect_groups=len(detection.groups),
        confirmation_rounds=confirmation_rounds,
        capacity_farms=sum(1 for farm in population.farms if cap & set(farm)),
        capacity_honest=len(cap & honest),
    )
