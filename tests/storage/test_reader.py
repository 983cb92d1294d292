"""netcheck.storage.reader: the read-only queries (integrity counts of load runs here;
the dashboard's queries are exercised through tests/web)."""

from __future__ import annotations

from test_store import outcomes, plan, refs

from netcheck.storage import Store
from netcheck.storage.reader import Reader


def test_integrity_counts(db_url: str) -> None:
    """Counts rows, distinct (round, node) pairs, spent canaries and canary checks."""
    store = Store(db_url)
    store.add_references(refs(10))
    reader = Reader(store)
    assert set(reader.integrity_counts().values()) == {0}
    store.record_plan(plan("R1", {"n1": ["r000", "r001"], "n2": ["r002"]}), started_at=1.0)
    store.record_outcome("R1", outcomes(), {"n1": {"released_ns": 1}, "n2": {}})
    assert reader.integrity_counts() == {
        "rounds": 1, "results": 2, "results_distinct": 2, "verdicts": 2,
        "verdicts_distinct": 2, "canaries_spent": 3, "canaries_checked": 3,
    }  # fmt: skip
    store.close()
