"""The spool of round results (docs/spool.md): durable appends, torn and corrupt lines
detected and reported while the rest is replayed, idempotent replay, and the same rows
from a spooled-then-replayed round as from a direct write."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlite_support import locked

from netcheck.errors import StorageUnavailable
from netcheck.records import NodeOutcome, NodeRecord, NodeTiming, RoundPlan, Verdict
from netcheck.storage import Store
from netcheck.storage.durable import Recorder
from netcheck.storage.spool import Spool, decode_line, encode_line

KEYS = [f"ed25519:node{i}" for i in range(3)]


def _plan(round_id: str) -> RoundPlan:
    return RoundPlan(round_id, "p", 4, 4, (), ())


def _results(seed: int) -> tuple[list[NodeOutcome], dict[str, NodeRecord]]:
    outcomes = [
        NodeOutcome(k, Verdict.PASS if i else Verdict.LATE, "ok" if i else "late by 1.2 s",
                    1.25 + i / 3, 2, 2)
        for i, k in enumerate(KEYS)
    ]  # fmt: skip
    records = {
        k: NodeRecord(
            NodeTiming(
                rtt_s=0.001 * i,
                deadline_s=3.0,
                release_start_ns=10**18 + i,
                arrived_ns=10**18 + 10**9 + seed,
            ),
            session_id=bytes([i, seed]) * 8,
            outputs=[[1, 2, 3, i]] * 4,
            commitment=bytes([seed]) * 32,
            signature=bytes([i + 1]) * 64,
            budget={"release_index": i},
        )  # fmt: skip
        for i, k in enumerate(KEYS)
    }
    return outcomes, records


def _snapshot(store: Store, round_id: str) -> tuple[Any, ...]:
    rnd = {r["round_id"]: r for r in store.list_rounds()}[round_id]
    verdicts = [{k: v for k, v in r.items() if k != "recorded_at"}
                for r in store.round_verdicts(round_id)]  # fmt: skip
    results = [store.result_row(round_id, k) for k in KEYS]
    return rnd, verdicts, results


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[Path, Store, Recorder]]:
    path = tmp_path / "netcheck.db"
    store = Store(f"sqlite:///{path}", busy_timeout_ms=50)
    rec = Recorder(store, tmp_path / "spool.jsonl", retry_s=0.2)
    yield path, store, rec
    store.close()


def test_line_checksum_detects_every_single_byte_flip() -> None:
    """Any one flipped byte of a line's JSON or checksum is refused."""
    line = encode_line({"type": "round", "id": "r/end", "x": [1, 2.5, "é"]}).rstrip(b"\n")
    assert decode_line(line)["x"] == [1, 2.5, "é"]
    for i in range(len(line)):
        bad = bytearray(line)
        bad[i] ^= 0x01
        with pytest.raises(ValueError):
            decode_line(bytes(bad))


def test_spooled_while_locked_then_replayed_same_rows_as_direct(
    db: tuple[Path, Store, Recorder],
) -> None:
    """Results spooled during a lock and replayed give exactly the rows (verdicts,
    timing, receipts) a direct write gives; status `recorded-late`, spool removed."""
    path, store, rec = db
    for rid in ("direct", "late"):
        store.record_plan(_plan(rid), 1.0)
    outcomes, records = _results(7)
    assert rec.end_round("direct", outcomes, records, status="complete", summary={"a": 1}) == (
        "recorded"
    )
    with locked(path):
        how = rec.end_round("late", outcomes, records, status="complete", summary={"a": 1})
        assert how == "spooled" and rec.spool.path.exists()
        assert "late" in rec.pending()
        assert rec.replay().waiting == ["late/end"]  # still locked: nothing written
    report = rec.replay()
    assert report.replayed == ["late/end"] and not report.bad and not report.conflicts
    assert not rec.spool.path.exists() and rec.pending() == {}
    d_round, d_verdicts, d_results = _snapshot(store, "direct")
    l_round, l_verdicts, l_results = _snapshot(store, "late")
    assert d_round["status"] == "complete" and l_round["status"] == "recorded-late"
    assert "database is locked" in l_round["summary"]["recorded_late"]["reason"]
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("round_id", "id")} for r in rows]  # noqa: E731
    assert strip(d_verdicts) == strip(l_verdicts)
    assert strip(d_results) == strip(l_results)
    assert l_results[0]["signature"] == (bytes([1]) * 64).hex()


def test_replay_is_idempotent(db: tuple[Path, Store, Recorder]) -> None:
    """Applying one entry twice, or to a round whose direct write did land (a commit
    the client saw fail), leaves the database unchanged and reports no conflict."""
    path, store, rec = db
    store.record_plan(_plan("r1"), 1.0)
    outcomes, records = _results(1)
    with locked(path):
        rec.end_round("r1", outcomes, records, status="complete", summary={})
    (entry,) = rec.spool.read().pending
    assert rec.apply(entry) == []
    once = _snapshot(store, "r1")
    assert rec.apply(entry) == []
    assert _snapshot(store, "r1") == once
    rec.replay()
    assert _snapshot(store, "r1") == once
    store.record_plan(_plan("r2"), 1.0)  # the direct write landed first
    rec.end_round("r2", outcomes, records, status="complete", summary={})
    before = _snapshot(store, "r2")
    assert rec.apply({**entry, "round_id": "r2", "id": "r2/end"}) == []
    assert _snapshot(store, "r2") == before and before[0]["status"] == "complete"


def test_torn_and_corrupt_lines_reported_rest_replayed(
    db: tuple[Path, Store, Recorder],
) -> None:
    """A corrupt middle line and a torn last line (crash mid-append) are reported with
    their line numbers; the other entries are replayed; the file is kept as `.bad-*`;
    an append after the torn line is not swallowed by it."""
    path, store, rec = db
    for rid in ("r1", "r2", "r3", "r4"):
        store.record_plan(_plan(rid), 1.0)
    outcomes, records = _results(3)
    with locked(path):
        for rid in ("r1", "r2", "r3"):
            assert rec.end_round(rid, outcomes, records, status="complete", summary={}) == (
                "spooled"
            )
    raw = rec.spool.path.read_bytes().split(b"\n")
    middle = bytearray(raw[1])
    middle[len(middle) // 2] ^= 0x20  # one flipped bit on disk
    raw[1] = bytes(middle)
    torn = encode_line({"type": "round", "id": "rX/end"})[:20]  # crash mid-append
    rec.spool.path.write_bytes(b"\n".join(raw) + torn)
    with locked(path):  # an append after the torn line keeps its own line
        rec.end_round("r4", outcomes, records, status="complete", summary={})
    contents = rec.spool.read()
    assert [e["id"] for e in contents.pending] == ["r1/end", "r3/end", "r4/end"]
    assert [n for n, _ in contents.bad] == [2, 4]
    report = rec.replay()
    assert report.replayed == ["r1/end", "r3/end", "r4/end"]
    assert [n for n, _ in report.bad] == [2, 4]
    assert "checksum mismatch" in report.bad[0][1]
    for rid in ("r1", "r3", "r4"):
        assert len(store.round_verdicts(rid)) == 3
    assert store.round_verdicts("r2") == []  # its only copy was the corrupt line
    assert not rec.spool.path.exists()
    (kept,) = path.parent.glob("spool.jsonl.bad-*")
    assert len(Spool(kept).read().bad) == 2


def test_append_is_fsynced_and_unwritable_spool_raises(tmp_path: Path) -> None:
    """Each append reaches the file before returning; a spool that cannot be written
    raises StorageError (the caller then must not acknowledge)."""
    spool = Spool(tmp_path / "s" / "spool.jsonl")
    spool.append({"type": "round", "id": "a/end", "round_id": "a"})
    assert [e["id"] for e in spool.read().pending] == ["a/end"]
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir(mode=0o500)
        with pytest.raises(Exception, match="cannot write the spool"):
            Spool(tmp_path / "ro" / "x.jsonl").append({"type": "round", "id": "b"})
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(Exception, match="cannot write the spool"):
        Spool(blocker / "x.jsonl").append({"type": "round", "id": "b"})


def test_retry_budget_is_bounded(db: tuple[Path, Store, Recorder]) -> None:
    """A write retried under a held lock gives up after about its budget."""
    import time

    path, store, rec = db
    with locked(path):
        t0 = time.monotonic()
        with pytest.raises(StorageUnavailable, match="database is locked"):
            rec.record_plan(_plan("x"), 1.0)
        assert time.monotonic() - t0 < 2.0
    assert store.list_rounds() == []
