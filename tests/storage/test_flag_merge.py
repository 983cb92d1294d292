"""One open flag per node set and behaviour (netcheck.storage.flag_merge), SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from netcheck.storage import Store
from netcheck.storage.flag_merge import merge_evidence, raise_flag
from netcheck.storage.flags import FlagStore
from netcheck.storage.reviews import ReviewStore


@pytest.fixture
def flags(db_url: str) -> FlagStore:
    return FlagStore(Store(db_url))


def ev(*rounds: str) -> dict[str, object]:
    return {"rule": "r", "rounds": list(rounds), "strike_rounds": list(rounds[:1]),
            "latencies": {r: {"service_s": 0.5} for r in rounds}}  # fmt: skip


def test_a_repeat_finding_adds_to_the_open_flag(flags: FlagStore) -> None:
    """Same kind, profile and nodes: one flag whose rounds, latencies and occurrences grow."""
    a, new_a = raise_flag(flags, "capacity", "confirmed", "p", ["n1"], 3.0, 3.0, ev("r1", "r2"))
    b, new_b = raise_flag(flags, "capacity", "confirmed", "p", ["n1"], 4.0, 3.0, ev("r2", "r3"))
    assert (new_a, new_b) == (True, False) and a == b
    assert len(flags.list_flags(kind="capacity")) == 1
    flag = flags.get_flag(a)
    assert flag is not None and flag.statistic == 4.0
    e = flag.evidence
    assert e is not None
    assert e["rounds"] == ["r1", "r2", "r3"] and e["strike_rounds"] == ["r1", "r2"]
    assert set(e["latencies"]) == {"r1", "r2", "r3"}
    assert [o["statistic"] for o in e["occurrences"]] == [3.0, 4.0]
    assert e["occurrences"][1]["rounds"] == ["r2", "r3"]


def test_other_nodes_kind_or_profile_raise_their_own_flag(flags: FlagStore) -> None:
    """A different node set, kind or profile is another behaviour: another flag."""
    first, _ = raise_flag(flags, "capacity", "confirmed", "p", ["n1"], 3.0, 3.0, ev("r1"))
    ids = {
        raise_flag(flags, "capacity", "confirmed", "p", ["n1", "n2"], 3.0, 3.0, ev("r1"))[0],
        raise_flag(flags, "relay", "confirmed", "p", ["n1"], 0.1, 0.01, ev("r1"))[0],
        raise_flag(flags, "capacity", "confirmed", "q", ["n1"], 3.0, 3.0, ev("r1"))[0],
    }
    assert first not in ids and len(ids) == 3


def test_resolved_or_false_positive_flags_take_no_more_evidence(flags: FlagStore) -> None:
    """After a resolve (or false positive) the behaviour seen again opens a new flag;
    an acknowledged flag still takes evidence."""
    reviews = ReviewStore(flags.store)
    a, _ = raise_flag(flags, "capacity", "confirmed", "p", ["n1"], 3.0, 3.0, ev("r1"))
    reviews.review(a, "acknowledged", "ann")
    assert raise_flag(flags, "capacity", "confirmed", "p", ["n1"], 3.0, 3.0, ev("r2")) == (a, False)
    reviews.review(a, "resolved", "ann", "moved the node")
    b, new = raise_flag(flags, "capacity", "confirmed", "p", ["n1"], 3.0, 3.0, ev("r3"))
    assert new and b != a
    reviews.review(b, "false-positive", "ann")
    c, new = raise_flag(flags, "capacity", "confirmed", "p", ["n1"], 3.0, 3.0, ev("r4"))
    assert new and c not in (a, b)


def test_pending_becomes_confirmed_and_cleared_records_never_merge(flags: FlagStore) -> None:
    """A pending relay flag confirmed later is one confirmed flag; cleared records are
    always their own rows."""
    a, _ = raise_flag(flags, "relay", "pending", "p", ["n1"], 3.0, 3.0, ev("r1"))
    raise_flag(flags, "relay", "confirmed", "p", ["n1"], 0.2, 0.01, ev("r2"))
    flag = flags.get_flag(a)
    assert flag is not None and flag.status == "confirmed"
    c1, _ = raise_flag(flags, "shared-backend", "cleared", "p", ["n1", "n2"], 0.3, 1e-3, ev("r1"))
    c2, _ = raise_flag(flags, "shared-backend", "cleared", "p", ["n1", "n2"], 0.3, 1e-3, ev("r2"))
    assert c1 != c2


def test_merge_evidence_unions_lists_and_recurses() -> None:
    """Lists: union in order; mappings: key by key; other values: the newer."""
    old = {"a": [1, 2], "m": {"x": [{"k": 1}], "s": 1}, "v": 1}
    new = {"a": [2, 3], "m": {"x": [{"k": 1}, {"k": 2}], "s": 2}, "w": 5}
    assert merge_evidence(old, new) == {
        "a": [1, 2, 3], "m": {"x": [{"k": 1}, {"k": 2}], "s": 2}, "v": 1, "w": 5,
    }  # fmt: skip
