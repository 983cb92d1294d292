"""netcheck.records: typed records, their enums' text, and a NodeRecord's stored row."""

from __future__ import annotations

import json

from netcheck.records import (
    FlagKind,
    FlagStatus,
    NodeOutcome,
    NodeRecord,
    NodeTiming,
    RoundKind,
    RoundPlan,
    RoundReport,
    Verdict,
)
from netcheck.storage import Store


def test_enums_are_their_stored_text() -> None:
    """Kinds and statuses equal (and serialise as) the text the database and JSON hold."""
    assert [str(k) for k in RoundKind] == ["full", "screening", "confirmation"]
    assert FlagKind.SHARED_BACKEND == "shared-backend" and FlagStatus.PENDING == "pending"
    report = RoundReport("r", "p", "complete", kind=RoundKind.SCREENING)
    assert json.loads(json.dumps(report.as_dict()))["kind"] == "screening"


def test_node_record_stored_row(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A NodeRecord is stored as hex receipt columns, release start as ``released_ns``
    and every other timing field in ``extra``; bytes never cross as hex before storage."""
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    store.record_plan(RoundPlan("R", "p", 2, 2, (), ()), started_at=1.0)
    timing = NodeTiming(rtt_s=0.01, release_start_ns=100, release_end_ns=120, arrived_ns=600,
                        probe_samples_s=[0.02], probe_rtt_s=0.02)  # fmt: skip
    rec = NodeRecord(timing, b"\x01" * 16, [[1, 2], [3, 4]], b"\xaa" * 32, b"\xbb" * 64, None)
    store.record_outcome("R", [NodeOutcome("n", Verdict.PASS, "ok", 0.5, 0, 0)], {"n": rec})
    (row,) = store.round_verdicts("R")
    assert (row["released_ns"], row["arrived_ns"], row["rtt_s"]) == (100, 600, 0.01)
    assert row["session_id"] == "01" * 16 and row["commitment"] == "aa" * 32
    assert row["signature"] == "bb" * 64
    assert (store.result_row("R", "n") or {})["outputs"] == [[1, 2], [3, 4]]
    assert row["extra"]["probe_rtt_s"] == 0.02 and row["extra"]["release_end_ns"] == 120
    assert set(row["extra"]) == set(vars(timing)) - {"rtt_s", "arrived_ns"}
    store.close()
