"""Tests for netcheck.storage.flags (round schedules and flags) on SQLite and PostgreSQL."""

from __future__ import annotations

import math

import pytest

from netcheck.errors import StorageError
from netcheck.records import (
    Assignment,
    FlagStatus,
    NodeOutcome,
    NodeRecord,
    NodeTiming,
    RoundPlan,
    Verdict,
)
from netcheck.storage import Store
from netcheck.storage.flags import FlagStore, jsonable


@pytest.fixture
def flags(db_url: str) -> FlagStore:
    return FlagStore(Store(db_url))


def _round(fs: FlagStore, rid: str, started: float, loaded: dict[str, bool], kind: str) -> None:
    """Store a complete round with one result row per loaded node and its schedule."""
    assignments = tuple(
        Assignment(k, ("a", "b"), (), (), (), bytes(32), bytes(12))
        for k, on in loaded.items()
        if on
    )
    fs.store.record_plan(RoundPlan(rid, "p", 2, 2, assignments, ()), started)
    fs.record_schedule(rid, "p", kind, "explicit", loaded)
    outcomes = [NodeOutcome(a.node_key, Verdict.PASS, "ok", 0.5, 0, 0) for a in assignments]
    records = {
        a.node_key: NodeRecord(NodeTiming(release_start_ns=100, arrived_ns=600, rtt_s=0.01),
                               commitment=b"\x01" * 32, signature=b"\x02" * 64)
        for a in assignments
    }  # fmt: skip
    fs.store.record_outcome(rid, outcomes, records)
    fs.store.finish_round(rid, "complete", {})


def test_jsonable_makes_strict_json() -> None:
    """Non-finite floats become None, bytes hex, tuples and sets lists."""
    got = jsonable({"a": math.nan, "b": math.inf, "c": b"\xff", "d": (1, 2.5), "e": {3, 1}})
    assert got == {"a": None, "b": None, "c": "ff", "d": [1, 2.5], "e": [1, 3]}


def test_add_and_get_flag_round_trips_evidence(flags: FlagStore) -> None:
    """A stored flag reads back with sorted node keys and strict-JSON evidence."""
    fid = flags.add_flag(
        "shared-backend", "confirmed", "p", ["n2", "n1"], 1e-6, 5e-4,
        {"rounds": ["r1"], "p": math.nan, "sig": b"\x00\x01"}, created_at=10.0,
    )  # fmt: skip
    flag = flags.get_flag(fid)
    assert flag is not None
    assert flag.node_keys == ("n1", "n2")
    assert flag.statistic == pytest.approx(1e-6) and flag.threshold == pytest.approx(5e-4)
    assert flag.evidence == {"rounds": ["r1"], "p": None, "sig": "0001"}
    assert flags.get_flag(fid + 100) is None


def test_list_flags_filters_and_omits_evidence(flags: FlagStore) -> None:
    """Listing filters by kind, status and node, newest first, without the evidence."""
    a = flags.add_flag("capacity", "confirmed", "p", ["n1"], 3.0, 3.0, {})
    b = flags.add_flag("shared-backend", "cleared", "p", ["n1", "n2"], 0.1, 0.01, {})
    c = flags.add_flag("relay", "pending", "p", ["n3"], math.inf, 0.015, {})
    assert [f.flag_id for f in flags.list_flags()] == [c, b, a]
    assert flags.list_flags()[0].evidence is None
    assert "evidence" not in flags.list_flags()[0].as_dict()
    assert [f.flag_id for f in flags.list_flags(kind="capacity")] == [a]
    assert [f.flag_id for f in flags.list_flags(status="cleared")] == [b]
    assert [f.flag_id for f in flags.list_flags(node_key="n1")] == [b, a]
    assert flags.list_flags(kind="relay")[0].statistic is None  # inf is not JSON


def test_set_status_and_validation(flags: FlagStore) -> None:
    """Status changes are stored; unknown statuses and empty node sets are refused."""
    fid = flags.add_flag("relay", "pending", "p", ["n1"], 0.1, 0.015, {})
    assert flags.set_status(fid, "cleared")
    assert flags.list_flags()[0].status == FlagStatus.CLEARED
    assert not flags.set_status(fid + 1, "cleared")
    with pytest.raises(ValueError):
        flags.add_flag("relay", "bogus", "p", ["n1"], None, None, {})
    with pytest.raises(ValueError):
        flags.add_flag("relay", "pending", "p", [], None, None, {})


def test_schedules_and_recent_rounds(flags: FlagStore) -> None:
    """Recent rounds come oldest first with full schedules and raw result rows."""
    _round(flags, "r1", 1.0, {"n1": True, "n2": False}, "screening")
    _round(flags, "r2", 2.0, {"n1": True, "n2": True}, "full")
    _round(flags, "r3", 3.0, {"n1": False, "n2": True}, "confirmation")
    _round(flags, "r4", 4.0, {"n1": False, "n2": True}, "screening")
    got = flags.recent_rounds("p", ("screening", "full"), limit=2)
    assert got.round_ids == ("r2", "r4")
    assert got.kinds == {"r2": "full", "r4": "screening"}
    assert got.schedules["r4"] == {"n1": False, "n2": True}
    rows = sorted((r["round_id"], r["node_key"]) for r in got.results)
    assert rows == [("r2", "n1"), ("r2", "n2"), ("r4", "n2")]
    raw = next(r for r in got.results if r["round_id"] == "r4")
    assert (raw["released_ns"], raw["arrived_ns"], raw["rtt_s"]) == (100, 600, 0.01)
    assert raw["commitment"] == "01" * 32
    assert flags.schedule("r3")["kind"] == "confirmation"  # type: ignore[index]
    assert flags.schedule("nope") is None


def test_round_rules_reads_kind_and_rule_by_round(flags: FlagStore) -> None:
    """``round_rules``: (kind, rule) of the given rounds that have a schedule, the others
    left out, over more ids than one chunk (500) holds."""
    _round(flags, "r1", 1.0, {"a": True}, "screening")
    _round(flags, "r2", 2.0, {"a": True}, "full")
    flags.store.record_plan(RoundPlan("r3", "p", 2, 2, (), ()), 3.0)  # no schedule
    ids = [f"x{i}" for i in range(1200)] + ["r2", "r3", "r1", "r1"]
    assert flags.round_rules(ids) == {"r1": ("screening", "explicit"), "r2": ("full", "explicit")}
    assert flags.round_rules([]) == {}


def test_record_schedule_refuses_bad_kind_and_unknown_round(flags: FlagStore) -> None:
    """A schedule needs a known kind and an existing round."""
    with pytest.raises(ValueError):
        flags.record_schedule("r1", "p", "weird", "explicit", {})
    with pytest.raises(StorageError):
        flags.record_schedule("missing-round", "p", "full", "all", {"n1": True})


def test_recent_verdicts_newest_first(flags: FlagStore) -> None:
    """A node's verdicts come back newest first, limited."""
    for i in range(3):
        _round(flags, f"r{i}", float(i), {"n1": True}, "full")
    got = flags.recent_verdicts("n1", 2)
    assert [v["round_id"] for v in got] == ["r2", "r1"]
    assert got[0]["verdict"] == "pass"


def test_verdicts_up_to_a_round_leave_out_later_rounds(flags: FlagStore) -> None:
    """``up_to_round``: the window as of that round (rounds planned after it left out,
    in plan order ``rounds.seq``, not wall-clock ``started_at``), the same as unbounded
    when it is the newest; a round not stored gives nothing. Without the bound, a round
    checked late (docs/spool.md) read the passes of the rounds recorded after it."""
    store = flags.store
    for i, rid in enumerate(("r0", "r1", "r2", "r3")):
        # started_at steps back at r2 (a clock set back): plan order still rules
        store.record_plan(RoundPlan(rid, "p", 2, 2, (), ()), 100.0 - 50 * (rid == "r2") + i)
    for rid, verdict in (
        ("r0", Verdict.LATE),
        ("r1", Verdict.LATE),
        ("r3", Verdict.PASS),
        ("r2", Verdict.PASS),
    ):  # r2 recorded last (its results replayed late)
        store.record_outcome(rid, [NodeOutcome("n1", verdict, "t", 1.0, 0, 0)], {})  # fmt: skip
    strikes = {"late", "missing"}
    newest = [v["round_id"] for v in flags.recent_verdicts("n1", 8)]
    assert newest == ["r2", "r3", "r1", "r0"]  # recording order, as before
    assert [v["round_id"] for v in flags.recent_verdicts("n1", 8, up_to_round="r1")] == [
        "r1", "r0",
    ]  # fmt: skip
    assert [v["round_id"] for v in flags.recent_verdicts("n1", 8, up_to_round="r2")] == [
        "r2", "r1", "r0",
    ]  # fmt: skip
    assert [v["round_id"] for v in flags.recent_verdicts("n1", 8, up_to_round="r3")] == newest
    assert [v["round_id"] for v in flags.recent_verdicts("n1", 1, strikes, up_to_round="r3")] == [
        "r1"
    ]  # fmt: skip
    assert flags.recent_verdicts("n1", 8, up_to_round="r0")[0]["verdict"] == "late"
    assert flags.recent_verdicts("n1", 8, up_to_round="no-such-round") == []
    assert flags.recent_verdicts("n2", 8, up_to_round="r3") == []
    assert flags.count_verdicts("n1", strikes) == 2
    assert flags.count_verdicts("n1", strikes, up_to_round="r0") == 1
    assert flags.count_verdicts("n1", {"pass"}, up_to_round="r2") == 1
    assert flags.count_verdicts("n1", {"pass"}, up_to_round="r3") == 2


def test_node_flag_evidence_in_constant_queries(flags: FlagStore) -> None:
    """A node's flag evidence of one kind, newest first and limited, in two queries
    however many flags there are (no query per flag)."""
    from sqlalchemy import event

    for i in range(12):
        flags.add_flag("relay", "confirmed", "p", ["a"] if i % 3 else ["a", "b"], 1.0, 0.5,
                       {"rounds": [f"r{i}"]})  # fmt: skip
    flags.add_flag("capacity", "confirmed", "p", ["a"], 3.0, 2.0, {"strike_rounds": ["x"]})
    statements: list[str] = []
    engine = flags.store._engine

    def count(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(engine, "before_cursor_execute", count)
    try:
        got = flags.node_flag_evidence("relay", "a", limit=5)
        only_b = flags.node_flag_evidence("relay", "b", limit=50)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert [e["rounds"] for e in got] == [["r11"], ["r10"], ["r9"], ["r8"], ["r7"]]
    assert [e["rounds"] for e in only_b] == [["r9"], ["r6"], ["r3"], ["r0"]]
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) == 4
    assert flags.node_flag_evidence("relay", "nobody") == []


def test_alone_results_are_a_nodes_single_node_confirmation_rounds_in_order(
    flags: FlagStore,
) -> None:
    """A node's alone rounds are the complete confirmation rounds in which it has the
    only result row, oldest first by persistence order (not start time), whatever ran
    them; not a round loading two nodes, a screening round loading it alone, another
    node's alone round, an unfinished round or another profile's."""
    _round(flags, "c2", 5.0, {"n1": True, "n2": False}, "confirmation")  # stored first
    _round(flags, "c1", 1.0, {"n1": True, "n2": False}, "confirmation")
    _round(flags, "both", 2.0, {"n1": True, "n2": True}, "confirmation")
    _round(flags, "s", 3.0, {"n1": True, "n2": False}, "screening")
    _round(flags, "other", 4.0, {"n1": False, "n2": True}, "confirmation")
    _round(flags, "c3", 6.0, {"n1": True, "n2": False}, "confirmation")
    job = Assignment("n1", ("a", "b"), (), (), (), bytes(32), bytes(12))
    flags.store.record_plan(RoundPlan("open", "p", 2, 2, (job,), ()), 7.0)
    flags.record_schedule("open", "p", "confirmation", "explicit", {"n1": True})
    flags.store.record_outcome("open", [NodeOutcome("n1", Verdict.PASS, "ok", 0.5, 0, 0)], {})
    got = flags.alone_results("p", "n1")
    assert [r["round_id"] for r in got] == ["c2", "c1", "c3"]
    assert (got[0]["released_ns"], got[0]["arrived_ns"], got[0]["rtt_s"]) == (100, 600, 0.01)
    assert [r["round_id"] for r in flags.alone_results("p", "n2")] == ["other"]
    assert flags.alone_results("q", "n1") == []


def test_a_node_that_acked_and_left_before_its_release_is_loaded_and_censored(
    flags: FlagStore,
) -> None:
    """Session 12 (docs/detection.md "What escapes", leaving when co-loaded): a node
    that held its screening job (written to it in full; acknowledged or not) and closed
    its session before the release has no release stamp, but its stored job-written
    (or ack) stamp makes it loaded, without a result, so the contention analysis
    censors it at the deadline; a node whose job was never written in full stays
    unloaded (both backends: the stamps are read from the JSON ``extra``)."""
    from netcheck.analysis.screening import timing_rows
    from netcheck.analysis.timing import log_service_matrix

    keys = ("ok", "left", "never", "unacked")
    assignments = tuple(Assignment(k, ("a", "b"), (), (), (), bytes(32), bytes(12)) for k in keys)
    flags.store.record_plan(RoundPlan("r1", "p", 2, 2, assignments, ()), 1.0)
    flags.record_schedule("r1", "p", "screening", "explicit", dict.fromkeys(keys, True))
    flags.store.record_outcome("r1", [
        NodeOutcome("ok", Verdict.PASS, "ok", 0.5, 0, 0),
        NodeOutcome("left", Verdict.MISSING, "left after its ack", None, 0, 0),
        NodeOutcome("never", Verdict.DISCONNECTED, "job write blocked", None, 0, 0),
        NodeOutcome("unacked", Verdict.MISSING, "left on its job, before acking", None, 0, 0),
    ], {
        "ok": NodeRecord(NodeTiming(acked_ns=2**62, release_start_ns=2**62 + 100,
                                    arrived_ns=2**62 + 500_000_100, rtt_s=0.0),
                         commitment=b"\x01" * 32),
        "left": NodeRecord(NodeTiming(job_sent_ns=10, acked_ns=2**62, rtt_s=0.0)),
        "never": NodeRecord(NodeTiming(job_sent_ns=10, rtt_s=0.0)),
        "unacked": NodeRecord(NodeTiming(job_sent_ns=10, job_written_ns=2**62, rtt_s=0.0)),
    })  # fmt: skip
    flags.store.finish_round("r1", "complete", {})
    stored = flags.recent_rounds("p", ("screening",), limit=5)
    loaded = {r.node_key: r.loaded for r in timing_rows(stored)}
    assert loaded == {"ok": True, "left": True, "never": False, "unacked": True}
    m = log_service_matrix(timing_rows(stored), keys, ("r1",), deadline_s=2.0)
    assert m.loaded[:, 0].tolist() == [True, True, False, True]
    assert m.censored[:, 0].tolist() == [False, True, False, True]
    assert math.isclose(m.y[1, 0], math.log(2.0))
    assert math.isclose(m.y[3, 0], math.log(2.0))
