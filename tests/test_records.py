"""netcheck.records: typed records, their enums' text, and a NodeRecord's stored row."""

from __future__ import annotations

import json

import pytest

from netcheck.records import (
    Flag,
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
from netcheck.storage.spool_entries import timings_entry


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


def test_flag_round_trips_its_row_and_refuses_unknown_kinds() -> None:
    """A ``flags`` row reads into a typed Flag and back to the same JSON document;
    a row without evidence has no ``evidence`` key; unknown kinds are an error."""
    row = {"flag_id": 3, "kind": "relay", "status": "pending", "profile": "p",
           "node_keys": ["a", "b"], "created_at": 1.5, "statistic": None, "threshold": 0.01,
           "evidence": {"rounds": ["r1"]}}  # fmt: skip
    flag = Flag.from_row(row)
    assert flag.kind is FlagKind.RELAY and flag.status is FlagStatus.PENDING
    assert flag.node_keys == ("a", "b")
    assert flag.as_dict() == row and list(flag.as_dict()) == list(row)
    bare = {k: v for k, v in row.items() if k != "evidence"}
    assert Flag.from_row(bare).evidence is None and Flag.from_row(bare).as_dict() == bare
    with pytest.raises(ValueError):
        Flag.from_row({**row, "kind": "bogus"})


def test_node_record_evidence_round_trips_through_json() -> None:
    """``from_evidence`` reads back ``evidence()`` after JSON (bytes as hex), with and
    without timing, and refuses bad hex with the key named."""
    timing = NodeTiming(rtt_s=0.01, release_start_ns=100, arrival_stamp="kernel",
                        echo_samples_s=[0.001], probe_missed=2)  # fmt: skip
    recs = [
        NodeRecord(
            timing,
            b"\x01" * 16,
            [[1, 2]],
            b"\xaa" * 32,
            b"\xbb" * 64,
            None,
            budget={"release_index": 0},
            extra={"gateway": "g"},
        ),  # fmt: skip
        NodeRecord(error="oom"),
        NodeRecord(NodeTiming()),
    ]
    for rec in recs:
        stored = json.loads(json.dumps(timings_entry({"n": rec})["n"]))
        assert NodeRecord.from_evidence(stored) == rec
    with pytest.raises(ValueError, match="'signature' is not hex"):
        NodeRecord.from_evidence({"signature": "zz"})
