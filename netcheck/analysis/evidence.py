"""Evidence documents of flags (pure: no I/O, no clock).

Every flag stores an ``evidence`` JSON document from which an analyst can re-check it
without trusting netcheck (docs/detection.md "Flags and evidence"): the rule, the rounds,
the raw latencies and the nodes' signed receipts. This module builds those documents
from stored rows and the analysis results; :mod:`netcheck.coordinator.detection`
stores them.

Input rows are raw ``results`` rows (dicts with ``round_id``, ``node_key``,
``released_ns``, ``arrived_ns``, ``rtt_s``, ``session_id``, ``commitment``,
``signature`` and, for the relay test, ``extra``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from netcheck.analysis import rules
from netcheck.analysis.answers import SharingFinding
from netcheck.analysis.confirm import (
    RelayResult,
)
from netcheck.analysis.confirm_run import ConfirmationRun
from netcheck.analysis.detectors import DetectorConfig, SuspectGroup
from netcheck.analysis.screening import (
    RELAY_FLOOR_S,
    RELAY_MAD_K,
    RELAY_MIN_ROUNDS,
    RELAY_WINDOW_ROUNDS,
    SCHEDULE_RULE_TEXT,
    Analysis,
    ProbePairs,
    result_arrival,
)
from netcheck.analysis.timing import TimingRow
from netcheck.records import NodeRecord, StoredRounds

RECEIPT_FIELDS = ("session_id", "commitment", "signature")
RELAY_SAMPLE_KEYS = ("echo_samples_s", "probe_samples_s", "probe_rtt_s", "probe_missed",
                     "probe_wrong")  # fmt: skip


def _hex(value: bytes | None) -> str | None:
    return None if value is None else value.hex()


def receipt(row: Mapping[str, Any]) -> dict[str, Any]:
    """The signed-receipt fields of a result row (docs/protocol.md receipts)."""
    return {k: row.get(k) for k in ("round_id", "node_key", *RECEIPT_FIELDS)}


def latency(row: Mapping[str, Any]) -> dict[str, Any]:
    """Raw release/arrival stamps (ns), echo RTT (s), whether a result came back, and the
    service time ``(arrived - released) / 1e9 - rtt`` in seconds (None without both
    stamps)."""
    timing = TimingRow(str(row.get("round_id")), str(row.get("node_key")), True,
                       row.get("released_ns"), result_arrival(row), row.get("rtt_s"))  # fmt: skip
    return {"released_ns": timing.released_ns, "arrived_ns": row.get("arrived_ns"),
            "rtt_s": timing.rtt_s, "result": bool(row.get("commitment")),
            "service_s": timing.service_s()}  # fmt: skip


def member_evidence(
    members: Sequence[str], round_ids: Sequence[str], result_rows: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Latencies ``{round_id: {node: ...}}`` and receipts of ``members`` in ``round_ids``."""
    want, rids = set(members), set(round_ids)
    latencies: dict[str, dict[str, Any]] = {}
    receipts = []
    for row in sorted(result_rows, key=lambda r: (r["round_id"], r["node_key"])):
        if row["node_key"] in want and row["round_id"] in rids:
            latencies.setdefault(row["round_id"], {})[row["node_key"]] = latency(row)
            if row.get("signature"):
                receipts.append(receipt(row))
    return latencies, receipts


def detection_summary(analysis: Analysis) -> dict[str, Any]:
    """Sizes, critical values, edges and suspect groups of one analysis (JSON-ready)."""
    det = analysis.detection
    return {
        "n_nodes": len(analysis.matrix.node_keys),
        "n_rounds": len(analysis.matrix.round_ids),
        "z_crit": det.z_crit,
        "p_crit": det.p_crit,
        "edges": [dataclasses.asdict(e) for e in det.edges],
        "groups": [list(g.members) for g in det.groups],
    }


def _bits(schedule: Mapping[str, bool], members: Sequence[str]) -> dict[str, bool]:
    """A confirmation round's schedule bits of the group's members and of every loaded
    node (the full schedule stays in ``round_schedules``). Keeps a record
    proportional to its rounds, not to rounds x connected nodes (a pooled history of
    4,096 rounds at 1,000 nodes was ~300 MB of bits)."""
    return {k: on for k, on in schedule.items() if on or k in members}


def shared_backend_evidence(
    group: SuspectGroup, stored: StoredRounds, analysis: Analysis, detector: DetectorConfig,
    run: ConfirmationRun, schedules: Mapping[str, dict[str, bool]],
    conf_rows: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """Evidence of the ``shared-backend`` flags (or the ``cleared`` record) of one
    confirmation (:class:`ConfirmationRun`): the screening window that raised the group
    and the confirmation rounds of both phases. The caller adds ``confirmed_members``
    (the flag's members)."""
    members = list(group.members)
    observations = run.judged  # earlier attempts' rounds within the group first
    pooled = {o.round_id for o in run.prior}
    conf_ids = [o.round_id for o in observations]
    lat_s, rec_s = member_evidence(members, stored.round_ids, stored.results)
    lat_c, rec_c = member_evidence(members, conf_ids, conf_rows)
    bits = {m: [int(stored.schedules[r].get(m, False)) for r in stored.round_ids]
            for m in members}  # fmt: skip
    group_res = run.group_result
    assert group_res is not None
    return {
        "rule": rules.shared_backend(group_res.effect_floor),
        "group": members,
        "flags": [list(f) for f in run.flags],
        "attempt": run.attempt,
        "alpha_attempt": run.alpha,
        "screening": {
            "rounds": list(stored.round_ids),
            "kinds": [stored.kinds[r] for r in stored.round_ids],
            "analysed_rounds": list(analysis.matrix.round_ids),
            "schedule_rule": SCHEDULE_RULE_TEXT,
            "schedule_bits": bits,
            "edges": [dataclasses.asdict(e) for e in group.edges],
            "z_crit": analysis.detection.z_crit,
            "p_crit": analysis.detection.p_crit,
            "detector_config": dataclasses.asdict(detector),
            "censor_deadline_s": analysis.deadline_s,
            "latencies": lat_s,
        },
        "confirmation": {
            "rounds": [
                {
                    "round_id": o.round_id,
                    "loaded": sorted(o.loaded),
                    "schedule": _bits(schedules[o.round_id], members),
                    "log_service": dict(o.log_service),
                    "pooled": o.round_id in pooled,
                }
                for o in observations
            ],  # fmt: skip
            "members": [dataclasses.asdict(t) for t in group_res.members],
            "p_threshold": group_res.p_threshold,
            "effect_floor": group_res.effect_floor,
            "beta_estimate": group_res.beta_estimate,
            "pairs": [
                {
                    "pair": list(pair),
                    "members": [dataclasses.asdict(t) for t in r.members],
                    "p_threshold": r.p_threshold,
                }
                for pair, r in run.pair_results.items()
            ],  # fmt: skip
            "looks": run.looks,
            "confirm_config": dataclasses.asdict(run.judge_config()),
            "latencies": lat_c,
        },
        "receipts": rec_s + rec_c,
    }


def flag_statistic(run: ConfirmationRun, flag: Sequence[str]) -> tuple[float, float]:
    """Largest member p inside ``flag`` (its pair tests, or the group test of a pair)
    and the per-member level it was held to."""
    results = [r for pair, r in run.pair_results.items() if set(pair) <= set(flag)]
    if not results and run.group_result is not None:
        results = [run.group_result]
    ps = [t.p for r in results for t in r.members if t.node_key in flag]
    level = min((r.p_threshold for r in results), default=math.nan)
    return max(ps, default=math.nan), level


def result_sharing_evidence(
    round_id: str, finding: SharingFinding, prompts: Mapping[str, Sequence[str]],
    records: Mapping[str, NodeRecord],
) -> dict[str, Any]:  # fmt: skip
    """Evidence of a ``result-sharing`` flag: the two nodes' prompts, outputs and receipts
    in the round where their answers matched."""
    pair = (finding.a, finding.b)
    receipts = [
        {
            "round_id": round_id,
            "node_key": k,
            "session_id": _hex(records[k].session_id),
            "commitment": _hex(records[k].commitment),
            "signature": _hex(records[k].signature),
        }
        for k in pair
    ]
    return {
        "rule": rules.result_sharing(),
        "round_id": round_id,
        "rounds": [round_id],
        "evidence": finding.evidence,
        "commitment": finding.commitment_hex,
        "positions": [list(p) for p in finding.positions],
        "prompts": {k: list(prompts.get(k, ())) for k in pair},
        "outputs": {k: records[k].outputs for k in pair},
        "receipts": receipts,
    }


def relay_evidence(
    probe_ref_s: float, rows: Sequence[Mapping[str, Any]], pairs: ProbePairs,
    res: RelayResult | None,
) -> dict[str, Any]:  # fmt: skip
    """Evidence of a ``relay`` flag: per round the echo and probe samples, the pairs the
    test ran on, and its parameters."""
    return {
        "rule": rules.relay(RELAY_FLOOR_S, RELAY_MAD_K, RELAY_MIN_ROUNDS),
        "rounds": [r["round_id"] for r in rows],
        "probe_rounds": list(pairs.round_ids),
        "probe_rtts_s": list(pairs.probe_rtts_s),
        "echo_rtts_s": list(pairs.echo_rtts_s),
        "unanswered_rounds": list(pairs.unanswered),
        "probe_ref_s": probe_ref_s,
        "floor_s": RELAY_FLOOR_S,
        "mad_k": RELAY_MAD_K,
        "min_rounds": RELAY_MIN_ROUNDS,
        "window_rounds": RELAY_WINDOW_ROUNDS,
        "relay": None if res is None else dataclasses.asdict(res),
        "samples": {
            r["round_id"]: {
                "rtt_s": r.get("rtt_s"),
                **{k: (r.get("extra") or {}).get(k) for k in RELAY_SAMPLE_KEYS},
            }
            for r in rows
        },  # fmt: skip
        "probe_definition": "netcheck.engines.probe (docs/protocol.md §5.9)",
        "receipts": [receipt(r) for r in rows if r.get("signature")],
    }
