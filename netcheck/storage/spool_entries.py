"""The spool's form of a round's results (docs/spool.md): verdicts and records as the
JSON of a spool entry, and back. No SQL and no file access here
(:mod:`netcheck.storage.spool` writes the entries, :mod:`netcheck.storage.durable`
makes and replays them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netcheck.errors import StorageError
from netcheck.records import NodeOutcome, NodeRecord, Verdict
from netcheck.storage.database import json_ready


def outcome_entry(o: NodeOutcome) -> dict[str, Any]:
    """A verdict as a JSON-able dict (the spool's form)."""
    return o.to_json()


def outcome_of(d: Mapping[str, Any]) -> NodeOutcome:
    """The inverse of :func:`outcome_entry`."""
    return NodeOutcome(
        d["node_key"], Verdict(d["verdict"]), d["reason"], d["elapsed_s"],
        d["canaries_checked"], d["canaries_matched"],
    )  # fmt: skip


def timings_entry(records: Mapping[str, NodeRecord]) -> dict[str, Any]:
    """A round's records as the spool entry's ``timings``: node key -> the record's
    evidence mapping (:meth:`NodeRecord.evidence`) as JSON (bytes as hex)."""
    return {k: json_ready(r.evidence()) for k, r in records.items()}


def records_of(timings: Mapping[str, Any]) -> tuple[dict[str, NodeRecord], dict[str, Any]]:
    """The inverse of :func:`timings_entry`: the records of a spool entry's ``timings``,
    and its round-level timings (values that are not mappings; spool files written
    before records were typed could hold them). An entry written before records were
    typed is stored as the same rows as then (:meth:`NodeRecord.from_evidence`).

    Raises:
        StorageError: an evidence mapping cannot be read (the entry stays in the spool).
    """
    records: dict[str, NodeRecord] = {}
    round_level: dict[str, Any] = {}
    for k, v in timings.items():
        if not isinstance(v, Mapping):
            round_level[k] = v
            continue
        try:
            records[k] = NodeRecord.from_evidence(v)
        except (TypeError, ValueError) as exc:
            raise StorageError(f"spooled record of {k} cannot be read: {exc}") from exc
    return records, round_level
