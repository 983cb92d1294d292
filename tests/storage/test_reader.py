"""netcheck.storage.reader: the read-only queries (integrity counts of load runs here;
the dashboard's queries are exercised through tests/web)."""

from __future__ import annotations

from test_store import outcomes, plan, refs

from netcheck.records import NodeOutcome, NodeRecord, NodeTiming, Verdict
from netcheck.storage import Store
from netcheck.storage.reader import Reader


def test_integrity_counts(db_url: str) -> None:
    """Counts rows, distinct (round, node) pairs, spent canaries and canary checks."""
    store = Store(db_url)
    store.add_references(refs(10))
    reader = Reader(store)
    assert set(reader.integrity_counts().values()) == {0}
    store.record_plan(plan("R1", {"n1": ["r000", "r001"], "n2": ["r002"]}), started_at=1.0)
    store.record_outcome("R1", outcomes(), {
        "n1": NodeRecord(NodeTiming(release_start_ns=1)), "n2": NodeRecord(),
    })  # fmt: skip
    assert reader.integrity_counts() == {
        "rounds": 1, "results": 2, "results_distinct": 2, "verdicts": 2,
        "verdicts_distinct": 2, "canaries_spent": 3, "canaries_checked": 3,
    }  # fmt: skip
    store.close()


def test_timing_matrix_uses_the_detectors_definitions(db_url: str) -> None:
    """The dashboard's loaded bits and service times are the detectors' ones
    (analysis.timing): a node sent work but never released is not loaded, and an error
    reply (no commitment) has no service time."""
    store = Store(db_url)
    store.add_references(refs(10))
    store.record_plan(plan("R1", {"n1": ["r000"], "n2": ["r001"], "n3": ["r002"]}), 1.0)
    store.record_outcome("R1", [
        NodeOutcome("n1", Verdict.PASS, "ok", 1.0, 1, 1),
        NodeOutcome("n2", Verdict.MISSING, "no ack", None, 1, 0),
        NodeOutcome("n3", Verdict.MISSING, "node error", None, 0, 0),
    ], {
        "n1": NodeRecord(NodeTiming(release_start_ns=100, arrived_ns=1_000_000_100, rtt_s=0.0),
                         commitment=b"\xaa" * 32),
        "n2": NodeRecord(NodeTiming()),
        "n3": NodeRecord(NodeTiming(release_start_ns=100, arrived_ns=200, rtt_s=0.0),
                         error="oom"),
    })  # fmt: skip
    m = Reader(store).timing_matrix(["n1", "n2", "n3"], ["R1"])
    assert m["loaded"] == {"n1": [True], "n2": [False], "n3": [True]}
    assert m["service_s"] == {"n1": [1.0], "n2": [None], "n3": [None]}
    store.close()


def test_timing_matrix_counts_a_node_that_acked_and_left_as_loaded(db_url: str) -> None:
    """A node that held its job (written in full: its job-written stamp, or its ack
    stamp, in the result's ``extra``) and left before its release is loaded, without a
    service time, acknowledged or not; one whose job write never completed is not
    (analysis.timing.effectively_loaded, session 12)."""
    store = Store(db_url)
    store.add_references(refs(10))
    store.record_plan(plan("R1", {"n1": ["r000"], "n2": ["r001"], "n3": ["r002"]}), 1.0)
    store.record_outcome("R1", [
        NodeOutcome("n1", Verdict.MISSING, "left after its ack", None, 1, 0),
        NodeOutcome("n2", Verdict.DISCONNECTED, "job write blocked", None, 1, 0),
        NodeOutcome("n3", Verdict.MISSING, "left on its job, before acking", None, 1, 0),
    ], {
        "n1": NodeRecord(NodeTiming(job_sent_ns=50, acked_ns=9_000_000_000_000_000_000)),
        "n2": NodeRecord(NodeTiming(job_sent_ns=50)),
        "n3": NodeRecord(NodeTiming(job_sent_ns=50, job_written_ns=9_000_000_000_000_000_000)),
    })  # fmt: skip
    m = Reader(store).timing_matrix(["n1", "n2", "n3"], ["R1"])
    assert m["loaded"] == {"n1": [True], "n2": [False], "n3": [True]}
    assert m["service_s"] == {"n1": [None], "n2": [None], "n3": [None]}
    store.close()
