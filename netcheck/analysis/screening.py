"""Screening analysis (pure: no I/O, no clock): schedules, stored rows -> timing rows,
detectors, confirmation observations, capacity strikes and the relay test.

docs/detection.md describes the method. The live coordinator runs these on rows read
from storage (:mod:`netcheck.coordinator.detection`); the simulation harness and tests
call them directly.

- :func:`round_kind`, :func:`hmac_load_rule`: which rounds load everybody and whom a
  screening round loads (the secret schedule of :mod:`netcheck.analysis.schedule`).
- :func:`timing_rows`, :func:`analyse`: stored rows -> :class:`TimingRow` ->
  :func:`log_service_matrix` -> :func:`median_polish` -> :func:`detect`.
- :func:`confirmation_observation`: one confirmation round for :func:`~netcheck.analysis.confirm.judge_confirmation`.
- :func:`capacity_check`: ``late``/``missing`` strikes in a node's recent verdicts.
- :func:`probe_pairs`, :func:`relay_suspect`, :func:`relay_check`: the relay test
  (docs/detection.md "Relay test").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from netcheck.analysis.coins import held_nodes, screen_round_ids
from netcheck.analysis.confirm import ConfirmationObservation, RelayResult, relay_excess
from netcheck.analysis.detectors import Detection, DetectorConfig, detect
from netcheck.analysis.schedule import screening_plan
from netcheck.analysis.timing import (
    TimingMatrix,
    TimingRow,
    log_service_matrix,
    median_polish,
    result_arrived_ns,
    stored_timing_row,
)
from netcheck.records import FlagKind, NodeTiming, RoundKind, StoredRounds, Verdict

CAPACITY = FlagKind.CAPACITY
RESULT_SHARING = FlagKind.RESULT_SHARING
STRIKE_VERDICTS = frozenset({str(Verdict.LATE), str(Verdict.MISSING)})
SCREEN_KINDS = (RoundKind.SCREENING, RoundKind.FULL)
SCHEDULE_RULE_TEXT = (
    "loaded = int.from_bytes(HMAC-SHA256(secret, b'netcheck/1 schedule\\0' + round_id + "
    "b'\\0' + node_key)[:8], 'big') >= 2**64 - floor(q * 2**64), q the load probability "
    "in each round's stored rule ('hmac-sha256/netcheck/1;q=...'; no q: 1/2, the tag's "
    "first bit) (netcheck.analysis.schedule); full rounds load every node"
)


def round_kind(index: int, full_every: int) -> str:
    """Kind of the ``index``-th (0-based) screening round: every ``full_every``-th is
    ``full`` (indices ``full_every - 1``, ``2 * full_every - 1``, ...), else ``screening``.

    Raises:
        ValueError: ``index < 0`` or ``full_every < 1``.
    """
    if index < 0 or full_every < 1:
        raise ValueError("need index >= 0 and full_every >= 1")
    return RoundKind.FULL if index % full_every == full_every - 1 else RoundKind.SCREENING


def hmac_load_rule(
    secret: bytes, probability: float = 0.5
) -> Callable[[str, Sequence[str]], set[str]]:
    """The load rule of screening rounds: ``(round_id, node_keys) -> loaded keys``, each
    node loaded with probability ``probability`` (:func:`~netcheck.analysis.schedule.
    screening_plan`).

    Raises:
        ValueError: ``probability`` outside (0, 1) (when the rule is called).
    """

    def rule(round_id: str, node_keys: Sequence[str]) -> set[str]:
        plan = screening_plan(secret, round_id, node_keys, probability)
        return {k for k, bit in plan.items() if bit}

    return rule


def result_arrival(row: Mapping[str, Any]) -> int | None:
    """Arrival of a *result* in a stored row (:func:`result_arrived_ns`)."""
    return result_arrived_ns(row.get("arrived_ns"), row.get("commitment"))


def timing_rows(stored: StoredRounds) -> list[TimingRow]:
    """:class:`TimingRow` per stored result row, raw times unchanged.

    Loaded and arrival as :func:`stored_timing_row` defines them (schedule bit set *and*
    job acknowledged; an error reply is no result); a loaded node without a result is
    left for :func:`log_service_matrix` to censor.
    """
    return [
        stored_timing_row(
            r["round_id"], r["node_key"],
            stored.schedules.get(r["round_id"], {}).get(r["node_key"], False), r,
        )
        for r in stored.results
    ]  # fmt: skip


@dataclass(frozen=True)
class Analysis:
    """Detector output over stored rounds, with the matrix it ran on."""

    matrix: TimingMatrix
    detection: Detection
    deadline_s: float


def analyse(stored: StoredRounds, deadline_s: float, cfg: DetectorConfig) -> Analysis:
    """Stored rows -> ``y`` matrix -> median polish (round effects shrunk toward 0 by
    ``cfg.round_prior_cells``) -> detectors (pure).

    Nodes are every node in any stored schedule (sorted); a missing result is censored
    at ``deadline_s`` (the profile's deadline without the RTT terms). With
    ``cfg.drop_full_rounds`` only ``screening`` rounds (random designs) enter: in a full
    round every farm is slowed at once, which links unrelated identities. Confirmation
    rounds with screening coins enter too (:mod:`netcheck.analysis.coins`), their held
    nodes' cells not observed (NaN, not censored) and their load bits kept.
    """
    keys = sorted({k for sched in stored.schedules.values() for k in sched})
    round_ids = screen_round_ids(stored, full=not cfg.drop_full_rounds)
    mat = log_service_matrix(timing_rows(stored), keys, round_ids, deadline_s)
    blank_held(mat, stored)
    polish = median_polish(mat.y, col_prior_cells=cfg.round_prior_cells)
    full = np.array([stored.kinds.get(r) == RoundKind.FULL for r in mat.round_ids], dtype=bool)
    detection = detect(polish.residuals, mat.loaded, tuple(keys), cfg, mat.censored, full)
    return Analysis(mat, detection, deadline_s)


def blank_held(mat: TimingMatrix, stored: StoredRounds) -> None:
    """In place: the cells of held nodes in ``mat``'s coin rounds become not observed
    (``y`` NaN, not censored; ``loaded`` unchanged)."""
    index = {k: i for i, k in enumerate(mat.node_keys)}
    for r, rid in enumerate(mat.round_ids):
        held = held_nodes(stored.contexts.get(rid))
        rows = [index[k] for k in held or () if k in index]
        mat.y[rows, r] = np.nan
        mat.censored[rows, r] = False


def confirmation_observation(
    round_id: str,
    schedule: Mapping[str, bool],
    result_rows: Sequence[Mapping[str, Any]],
    deadline_s: float,
) -> ConfirmationObservation:
    """One confirmation round as :func:`~netcheck.analysis.confirm.judge_confirmation` wants it (pure)."""
    stored = StoredRounds(
        (round_id,), {round_id: "confirmation"}, {round_id: dict(schedule)},
        tuple(dict(r) for r in result_rows if r["round_id"] == round_id),
    )  # fmt: skip
    rows = [r for r in timing_rows(stored) if r.loaded]
    keys = [r.node_key for r in rows]
    mat = log_service_matrix(rows, keys, [round_id], deadline_s)
    values = dict(zip(keys, mat.y[:, 0].tolist(), strict=True))
    return ConfirmationObservation(round_id, frozenset(keys), values)


def capacity_check(
    recent_verdicts: Sequence[Mapping[str, Any]], window: int, strikes: int
) -> tuple[list[Mapping[str, Any]], bool]:
    """Capacity strikes (pure): the ``late``/``missing`` verdicts among the ``window``
    most recent (newest first), and whether there are at least ``strikes`` of them."""
    hits = [v for v in recent_verdicts[:window] if v["verdict"] in STRIKE_VERDICTS]
    return hits, len(hits) >= strikes


#: Relay test (docs/detection.md "Relay test"): a node's most recent this many rounds,
#: of which at least ``RELAY_MIN_ROUNDS`` need a probe RTT; floor and MAD factor are the
#: library defaults of :func:`relay_excess` (15 ms, 3).
RELAY_WINDOW_ROUNDS = 16
RELAY_MIN_ROUNDS = 5
RELAY_FLOOR_S = 0.015
RELAY_MAD_K = 3.0


@dataclass(frozen=True)
class ProbePairs:
    """Per round of one node (oldest first): the fastest correct probe RTT and the echo
    RTT (min of the round's echoes), both in seconds; plus the rounds where echoes were
    answered but no probe was answered correctly (``unanswered``: none came back in
    time, or the answers were wrong)."""

    round_ids: tuple[str, ...]
    probe_rtts_s: tuple[float, ...]
    echo_rtts_s: tuple[float, ...]
    unanswered: tuple[str, ...]


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def probe_pairs(rows: Sequence[Mapping[str, Any]]) -> ProbePairs:
    """Pair probe and echo RTTs per round from stored rows of one node (pure).

    ``rows``: ``results`` rows (oldest first) with ``round_id``, ``rtt_s`` and the
    ``extra`` JSON of :class:`~netcheck.coordinator.rounds.NodeTiming` (``probe_rtt_s``,
    ``probe_samples_s``, ``probe_missed``, ``probe_wrong``). Rows without an echo RTT
    are skipped.
    """
    rids: list[str] = []
    probes: list[float] = []
    echoes: list[float] = []
    unanswered: list[str] = []
    for row in rows:
        extra = row.get("extra") or {}
        echo = _float(row.get("rtt_s"))
        probe = _float(extra.get("probe_rtt_s")) if isinstance(extra, Mapping) else None
        if echo is None:
            continue
        if probe is not None:
            rids.append(str(row["round_id"]))
            probes.append(probe)
            echoes.append(echo)
        elif isinstance(extra, Mapping) and (extra.get("probe_missed") or extra.get("probe_wrong")):
            unanswered.append(str(row["round_id"]))
    return ProbePairs(tuple(rids), tuple(probes), tuple(echoes), tuple(unanswered))


def relay_suspect(timing: NodeTiming, ref_probe_s: float) -> bool:
    """This round's timing of a node warrants the relay test: probe excess above the
    floor, or no correct probe answer while echoes were answered."""
    if timing.rtt_s is None:
        return False
    if timing.probe_rtt_s is None:
        return bool(timing.probe_missed or timing.probe_wrong)
    return timing.probe_rtt_s - timing.rtt_s - ref_probe_s > RELAY_FLOOR_S


def relay_check(pairs: ProbePairs, ref_probe_s: float) -> RelayResult | None:
    """The relay test on one node's pairs (pure): :func:`relay_excess` with the
    module's floor and MAD factor, paired per round; None with fewer than
    ``RELAY_MIN_ROUNDS`` rounds that have a probe RTT."""
    if len(pairs.probe_rtts_s) < RELAY_MIN_ROUNDS:
        return None
    return relay_excess(
        pairs.probe_rtts_s, pairs.echo_rtts_s, ref_probe_s, floor_s=RELAY_FLOOR_S,
        mad_k=RELAY_MAD_K, min_samples=RELAY_MIN_ROUNDS,
    )  # fmt: skip
