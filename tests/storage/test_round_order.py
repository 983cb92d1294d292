"""Recency follows persistence order, not the wall clock (issue #12 item 5), on SQLite
and PostgreSQL: rounds stored after the clock stepped back one hour are still the most
recent ones for the detectors' window, the dashboard, the admin API and the exports; and
a database from before ``rounds.seq`` is upgraded in place."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import create_engine, inspect, text

from netcheck.records import Assignment, NodeOutcome, NodeRecord, RoundPlan, Verdict
from netcheck.storage import Store
from netcheck.storage.flags import FlagStore
from netcheck.storage.reader import Reader

T0 = 1_800_000_000.0  # wall-clock start; the step back is one hour
OLD = ("old0", "old1", "old2", "old3")
NEW = ("new0", "new1", "new2", "new3")


def _flag_store(db_url: str) -> FlagStore:
    fs = FlagStore(Store(db_url))
    fs.store.upsert_node("n1", "n1", "p", "fp", {}, T0)
    return fs


class Clock:
    """A settable wall clock patched over ``time.time`` (the store stamps verdicts)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _round(fs: FlagStore, clock: Clock, rid: str, verdict: Verdict) -> None:
    """A complete screening round of node n1, started at ``clock.now`` (then +1 s)."""
    a = Assignment("n1", ("a", "b"), (), (), (), bytes(32), bytes(12))
    fs.store.record_plan(RoundPlan(rid, "p", 2, 2, (a,), ()), clock.now)
    fs.record_schedule(rid, "p", "screening", "explicit", {"n1": True})
    fs.store.record_outcome(rid, [NodeOutcome("n1", verdict, "x", 0.5, 1, 1)], {"n1": NodeRecord()})
    fs.store.finish_round(rid, "complete", {})
    clock.now += 1.0


@pytest.fixture
def stepped(db_url: str, monkeypatch: pytest.MonkeyPatch) -> FlagStore:
    """Four failing rounds, then the clock steps back one hour, then four passing ones."""
    clock = Clock(T0)
    monkeypatch.setattr(time, "time", clock)
    fs = _flag_store(db_url)
    for rid in OLD:
        _round(fs, clock, rid, Verdict.WRONG_ANSWER)
    clock.now -= 3600.0
    for rid in NEW:
        _round(fs, clock, rid, Verdict.PASS)
    return fs


def test_detection_window_keeps_rounds_after_clock_step_back(stepped: FlagStore) -> None:
    """The detectors' "most recent rounds" window holds the rounds stored last."""
    got = stepped.recent_rounds("p", ("screening",), limit=4)
    assert got.round_ids == NEW
    assert stepped.recent_rounds("p", ("screening",), limit=6).round_ids == OLD[2:] + NEW


def test_listings_put_rounds_after_clock_step_back_first(stepped: FlagStore) -> None:
    """Dashboard/admin round lists, node history, strikes and exports use store order."""
    store, reader = stepped.store, Reader(stepped.store)
    newest_first = list(reversed(OLD + NEW))
    assert [r["round_id"] for r in reader.rounds(limit=8)] == newest_first  # /rounds, page
    assert [r["round_id"] for r in reader.rounds(limit=2, offset=2)] == newest_first[2:4]
    assert [r["round_id"] for r in store.list_rounds(8)] == newest_first
    history = reader.node_history("n1", limit=4)  # oldest first
    assert [h["round_id"] for h in history] == list(NEW)
    (n1,) = reader.node_summaries()
    assert (n1["last_round"], n1["last_verdict"]) == ("new3", "pass")
    assert n1["strikes"] == 4  # the window of 10 holds all 8; the 4 failures are oldest
    _, rows = reader.export_rows("rounds")
    assert [r["round_id"] for r in rows] == list(OLD + NEW)
    matrix = reader.timing_matrix(["n1"], limit=4)
    assert matrix["round_ids"] == list(NEW)


def test_strike_window_is_the_last_verdicts_stored(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strikes count the node's last 10 verdicts stored, whatever their wall-clock stamp."""
    clock = Clock(T0)
    monkeypatch.setattr(time, "time", clock)
    fs = _flag_store(db_url)
    for i in range(10):
        _round(fs, clock, f"bad{i}", Verdict.WRONG_ANSWER)
    clock.now -= 3600.0
    for i in range(10):
        _round(fs, clock, f"good{i}", Verdict.PASS)
    (n1,) = Reader(fs.store).node_summaries()
    assert n1["strikes"] == 0
    assert n1["last_round"] == "good9"


def test_database_without_round_seq_is_upgraded(db_url: str) -> None:
    """An older database (no ``rounds.seq``) gets the column on open, numbered in the old
    listing order, and new rounds continue after it."""
    store = Store(db_url)
    for rid, started in (("a", 20.0), ("b", 10.0), ("c", 30.0)):
        store.record_plan(RoundPlan(rid, "p", 2, 2, (), ()), started)
    store.close()
    engine = create_engine(store._engine.url)  # same URL (and PostgreSQL search_path)
    with engine.begin() as conn:  # make it look like a database from before the column
        conn.execute(text("DROP INDEX ix_rounds_seq"))
        conn.execute(text("ALTER TABLE rounds DROP COLUMN seq"))
    engine.dispose()
    store = Store(db_url)
    assert [r["round_id"] for r in store.list_rounds()] == ["c", "a", "b"]
    assert {r["round_id"]: r["seq"] for r in store.list_rounds()} == {"b": 1, "a": 2, "c": 3}
    store.record_plan(RoundPlan("d", "p", 2, 2, (), ()), 0.0)  # clock far behind
    store.record_plan(RoundPlan("e", "p", 2, 2, (), ()), 0.0)
    assert [r["round_id"] for r in store.list_rounds(2)] == ["e", "d"]
    assert store.list_rounds(1)[0]["seq"] == 5
    store.close()
    Store(db_url).close()  # a second open finds nothing to upgrade


def test_database_without_results_node_index_is_upgraded(db_url: str) -> None:
    """An older database without ``ix_results_node`` gets it on open, once."""
    first = Store(db_url)
    engine = create_engine(first._engine.url)  # same URL (and PostgreSQL search_path)
    first.close()
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_results_node"))
    with engine.connect() as conn:
        assert "ix_results_node" not in {ix["name"] for ix in inspect(conn).get_indexes("results")}
    store = Store(db_url)
    store.close()
    with engine.connect() as conn:
        assert "ix_results_node" in {ix["name"] for ix in inspect(conn).get_indexes("results")}
    engine.dispose()
    Store(db_url).close()  # a second open finds nothing to upgrade
