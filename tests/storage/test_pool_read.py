"""The confirmation pool read (``recent_rounds(node_keys=...)``) on SQLite and
PostgreSQL: a group's own rounds, each schedule cut to the bits it needs; the round
contexts read; the screening read's ``kind_rules``."""

from __future__ import annotations

from netcheck.analysis.coins import COIN_RULE, HMAC_RULE, coin_context
from netcheck.records import Assignment, NodeOutcome, NodeRecord, RoundKind, RoundPlan, Verdict
from netcheck.storage import Store
from netcheck.storage.flags import FlagStore

OTHERS = [f"{i:064x}" for i in range(300)]


def _round(fs: FlagStore, rid: str, loaded: list[str]) -> None:
    """A complete confirmation round loading ``loaded`` among 300 other connected nodes."""
    assigned = tuple(Assignment(k, ("a",), (), (), (), bytes(32), bytes(12)) for k in loaded)
    fs.store.record_plan(RoundPlan(rid, "p", 1, 2, assigned, ()), 0.0)
    schedule = {**{k: False for k in OTHERS}, **{k: True for k in loaded}}
    fs.record_schedule(rid, "p", "confirmation", "explicit", schedule)
    fs.store.record_outcome(rid, [NodeOutcome(k, Verdict.PASS, "x", 0.5, 1, 1) for k in loaded],
                            {k: NodeRecord() for k in loaded})  # fmt: skip
    fs.store.finish_round(rid, "complete", {})


def test_pool_read_keeps_the_group_bits_and_the_loaded_nodes(db_url: str) -> None:
    """Only rounds that sent a member work; each schedule holds the asked nodes' bits and
    the loaded nodes', not the 300 other connected nodes' (4,096 full schedules of
    1,000 nodes held ~700 MB in the coordinator)."""
    fs = FlagStore(Store(db_url))
    for k in ("a", "b", "c", OTHERS[0]):
        fs.store.upsert_node(k, k, "p", "fp", {}, 0.0)
    _round(fs, "r1", ["a", "b"])
    _round(fs, "r2", ["a"])
    _round(fs, "r3", ["c"])
    _round(fs, "r4", ["b", OTHERS[0]])
    got = fs.recent_rounds("p", ["confirmation"], 10, node_keys=["a", "b"])
    assert got.round_ids == ("r1", "r2", "r4")
    assert got.schedules["r1"] == {"a": True, "b": True}
    assert got.schedules["r2"] == {"a": True}
    assert got.schedules["r4"] == {"b": True, OTHERS[0]: True}
    assert {r["node_key"] for r in got.results if r["round_id"] == "r4"} == {"b", OTHERS[0]}
    full = fs.recent_rounds("p", ["confirmation"], 10)
    assert len(full.schedules["r3"]) == 301
    fs.store.close()


def test_round_contexts_every_status_oldest_first(db_url: str) -> None:
    """The contexts of a profile's rounds of the asked kinds in persistence order, a
    round cut short (no results, not finished) included, ``{}`` where none was stored;
    with ``node_keys`` only rounds in which one of them has a result row."""
    fs = FlagStore(Store(db_url))
    for k in ("a", "b", "c"):
        fs.store.upsert_node(k, k, "p", "fp", {}, 0.0)
    plans = [("r1", ["a", "b"], "confirmation", {"n": 1}, True),
             ("r2", ["c"], "confirmation", {"n": 2}, True),
             ("r3", ["a"], "screening", {"n": 3}, True),
             ("r4", ["a"], "confirmation", {"n": 4}, False),  # cut short
             ("r5", ["b"], "confirmation", None, True)]  # fmt: skip
    for rid, loaded, kind, context, finished in plans:
        assigned = tuple(Assignment(k, ("a",), (), (), (), bytes(32), bytes(12)) for k in loaded)
        fs.store.record_plan(RoundPlan(rid, "p", 1, 2, assigned, ()), 0.0)
        fs.record_schedule(rid, "p", kind, "explicit", {k: True for k in loaded}, context)
        if finished:
            fs.store.record_outcome(rid, [NodeOutcome(k, Verdict.PASS, "x", 0.5, 1, 1)
                                          for k in loaded], {k: NodeRecord() for k in loaded})  # fmt: skip
            fs.store.finish_round(rid, "complete", {})
    assert fs.round_contexts("p", ["confirmation"]) == [{"n": 1}, {"n": 2}, {"n": 4}, {}]
    assert fs.round_contexts("p", ["confirmation"], node_keys=["a", "b"]) == [{"n": 1}, {}]
    assert fs.round_contexts("q", ["confirmation"]) == []
    fs.store.close()


def test_kind_rules_add_the_confirmation_rounds_with_coins(db_url: str) -> None:
    """``kind_rules``: the screening read takes the screening rounds and, of the
    confirmation rounds, those stored with the coin rule only (what
    ``Screening.analyse_and_confirm`` asks for); the order stays the persistence order."""
    fs = FlagStore(Store(db_url))
    for k in ("a", "b"):
        fs.store.upsert_node(k, k, "p", "fp", {}, 0.0)
    rounds = [("s1", "screening", HMAC_RULE, None), ("c1", "confirmation", "explicit", None),
              ("c2", "confirmation", COIN_RULE, coin_context(["a"])),
              ("s2", "screening", HMAC_RULE, None)]  # fmt: skip
    for rid, kind, rule, context in rounds:
        assigned = (Assignment("a", ("a",), (), (), (), bytes(32), bytes(12)),)
        fs.store.record_plan(RoundPlan(rid, "p", 1, 2, assigned, ()), 0.0)
        fs.record_schedule(rid, "p", kind, rule, {"a": True, "b": False}, context)
        fs.store.record_outcome(rid, [NodeOutcome("a", Verdict.PASS, "x", 0.5, 1, 1)],
                                {"a": NodeRecord()})  # fmt: skip
        fs.store.finish_round(rid, "complete", {})
    got = fs.recent_rounds("p", [RoundKind.SCREENING], 10,
                           kind_rules=[(RoundKind.CONFIRMATION, COIN_RULE)])  # fmt: skip
    assert got.round_ids == ("s1", "c2", "s2")
    assert got.contexts["c2"] == coin_context(["a"])
    assert fs.recent_rounds("p", ["screening"], 10).round_ids == ("s1", "s2")
    assert fs.recent_rounds(
        "p", ["screening"], 2, kind_rules=[("confirmation", COIN_RULE)]
    ).round_ids == ("c2", "s2")
    fs.store.close()
