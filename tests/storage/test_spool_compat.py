"""Spool files written before records were typed (the code of commit 8b0bef5, whose
``Store.record_outcome`` took evidence mappings) replay to exactly the rows that code
stored (docs/spool.md: a spool file stays replayable across an upgrade). The entries
and the rows are literals produced by that code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from netcheck.records import RoundPlan
from netcheck.storage import Store
from netcheck.storage.durable import Recorder

#: A round's end spooled by the coordinator: a full NodeRecord (every timing field,
#: budget, receipt), an error record, a record with empty timing (a skipped node) and
#: an outcome without a record.
OLD_ROUND_ENTRY = (
    b'319fb6a7 {"canary_ids":[],"finished_at":1796083342.2508774,"id":"R7/end","outcom'
    b'es":[{"canaries_checked":1,"canaries_matched":1,"elapsed_s":0.9,"node_key":"ed25'
    b'519:a","reason":"all canaries matched","verdict":"pass"},{"canaries_checked":1,"'
    b'canaries_matched":0,"elapsed_s":null,"node_key":"ed25519:b","reason":"node error'
    b'","verdict":"missing"},{"canaries_checked":0,"canaries_matched":0,"elapsed_s":nu'
    b'll,"node_key":"ed25519:c","reason":"fingerprint differs","verdict":"profile-mism'
    b'atch"},{"canaries_checked":1,"canaries_matched":0,"elapsed_s":null,"node_key":"e'
    b'd25519:d","reason":"gone","verdict":"disconnected"}],"reason":"record outcome R7'
    b': database is locked (database is locked)","round_id":"R7","spooled_at":17960833'
    b'42.2729115,"status":"complete","summary":{"total_s":1.5},"timings":{"ed25519:a":'
    b'{"budget":{"arrival_stamp":"kernel","processing_delay_s":5e-05,"release_index":1'
    b',"release_offset_s":1e-06,"release_write_s":4e-07},"commitment":"aaaaaaaaaaaaaaa'
    b'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","error":null,"outputs":[[1,2]'
    b',[3,4]],"session_id":"000102030405060708090a0b0c0d0e0f","signature":"bbbbbbbbbbb'
    b"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
    b'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","timing":{"acked_ns":2000,"arrival_stamp"'
    b':"kernel","arrived_ns":900000,"deadline_s":3.5,"echo_samples_s":[0.001,0.0011],"'
    b'job_sent_ns":1000,"probe_missed":1,"probe_rtt_s":0.002,"probe_samples_s":[0.002]'
    b',"probe_wrong":0,"processed_ns":950000,"release_end_ns":5400,"release_index":1,"'
    b'release_start_ns":5000,"rtt_s":0.0012}},"ed25519:b":{"budget":{"arrival_stamp":n'
    b'ull,"processing_delay_s":null,"release_index":0,"release_offset_s":0.0,"release_'
    b'write_s":3e-07},"commitment":null,"error":"engine failed: oom","outputs":null,"s'
    b'ession_id":"09090909090909090909090909090909","signature":null,"timing":{"acked_'
    b'ns":null,"arrival_stamp":null,"arrived_ns":null,"deadline_s":3.5,"echo_samples_s'
    b'":[],"job_sent_ns":1100,"probe_missed":0,"probe_rtt_s":null,"probe_samples_s":[]'
    b',"probe_wrong":0,"processed_ns":null,"release_end_ns":4300,"release_index":0,"re'
    b'lease_start_ns":4000,"rtt_s":0.002}},"ed25519:c":{"commitment":null,"error":null'
    b',"outputs":null,"session_id":null,"signature":null,"timing":{"acked_ns":null,"ar'
    b'rival_stamp":null,"arrived_ns":null,"deadline_s":null,"echo_samples_s":[],"job_s'
    b'ent_ns":null,"probe_missed":0,"probe_rtt_s":null,"probe_samples_s":[],"probe_wro'
    b'ng":0,"processed_ns":null,"release_end_ns":null,"release_index":null,"release_st'
    b'art_ns":null,"rtt_s":null}}},"type":"round"}'
)
#: The ``results`` rows (less ``id`` and ``round_id``) the old code stored on replay.
OLD_ROUND_ROWS: list[dict[str, Any]] = [
    {
        "node_key": "ed25519:a",
        "session_id": "000102030405060708090a0b0c0d0e0f",
        "released_ns": 5000,
        "arrived_ns": 900000,
        "rtt_s": 0.0012,
        "outputs": [[1, 2], [3, 4]],
        "commitment": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "signature": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        "error": None,
        "extra": {
            "acked_ns": 2000,
            "arrival_stamp": "kernel",
            "deadline_s": 3.5,
            "echo_samples_s": [0.001, 0.0011],
            "job_sent_ns": 1000,
            "probe_missed": 1,
            "probe_rtt_s": 0.002,
            "probe_samples_s": [0.002],
            "probe_wrong": 0,
            "processed_ns": 950000,
            "release_end_ns": 5400,
            "release_index": 1,
            "release_start_ns": 5000,
            "budget": {
                "arrival_stamp": "kernel",
                "processing_delay_s": 5e-05,
                "release_index": 1,
                "release_offset_s": 1e-06,
                "release_write_s": 4e-07,
            },
        },
    },
    {
        "node_key": "ed25519:b",
        "session_id": "09090909090909090909090909090909",
        "released_ns": 4000,
        "arrived_ns": None,
        "rtt_s": 0.002,
        "outputs": None,
        "commitment": None,
        "signature": None,
        "error": "engine failed: oom",
        "extra": {
            "acked_ns": None,
            "arrival_stamp": None,
            "deadline_s": 3.5,
            "echo_samples_s": [],
            "job_sent_ns": 1100,
            "probe_missed": 0,
            "probe_rtt_s": None,
            "probe_samples_s": [],
            "probe_wrong": 0,
            "processed_ns": None,
            "release_end_ns": 4300,
            "release_index": 0,
            "release_start_ns": 4000,
            "budget": {
                "arrival_stamp": None,
                "processing_delay_s": None,
                "release_index": 0,
                "release_offset_s": 0.0,
                "release_write_s": 3e-07,
            },
        },
    },
    {
        "node_key": "ed25519:c",
        "session_id": None,
        "released_ns": None,
        "arrived_ns": None,
        "rtt_s": None,
        "outputs": None,
        "commitment": None,
        "signature": None,
        "error": None,
        "extra": {
            "acked_ns": None,
            "arrival_stamp": None,
            "deadline_s": None,
            "echo_samples_s": [],
            "job_sent_ns": None,
            "probe_missed": 0,
            "probe_rtt_s": None,
            "probe_samples_s": [],
            "probe_wrong": 0,
            "processed_ns": None,
            "release_end_ns": None,
            "release_index": None,
            "release_start_ns": None,
        },
    },
    {
        "node_key": "ed25519:d",
        "session_id": None,
        "released_ns": None,
        "arrived_ns": None,
        "rtt_s": None,
        "outputs": None,
        "commitment": None,
        "signature": None,
        "error": None,
        "extra": None,
    },
]
#: (node, verdict, reason, elapsed_s, checked, matched, passed) the old code stored.
OLD_ROUND_VERDICTS = [
    ("ed25519:a", "pass", "all canaries matched", 0.9, 1, 1, True),
    ("ed25519:b", "missing", "node error", None, 1, 0, False),
    ("ed25519:c", "profile-mismatch", "fingerprint differs", None, 0, 0, False),
    ("ed25519:d", "disconnected", "gone", None, 1, 0, False),
]

#: A gateway's part in the old mapping forms: the participant's evidence (hex text, a
#: free ``clock_offset_s``), the leader's ``{"gateway": g}`` and a round-level timing.
OLD_GATEWAY_ENTRY = (
    b'd0e6d34c {"canary_ids":[],"finished_at":1796083733.915787,"id":"R9/gateway-gw-2"'
    b',"outcomes":[{"canaries_checked":1,"canaries_matched":1,"elapsed_s":0.07,"node_k'
    b'ey":"ed25519:e","reason":"all canaries matched","verdict":"pass"},{"canaries_che'
    b'cked":1,"canaries_matched":0,"elapsed_s":null,"node_key":"ed25519:f","reason":"g'
    b'ateway gw-3 lost mid-round","verdict":"disconnected"}],"reason":"record outcome '
    b'R9: database is locked (database is locked)","round_id":"R9","spooled_at":179608'
    b'3733.942033,"status":null,"summary":{},"timings":{"ed25519:e":{"clock_offset_s":'
    b'0.00025,"commitment":"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccc'
    b'cccccc","error":null,"outputs":[[5,6]],"session_id":"0f0f0f0f0f0f0f0f0f0f0f0f0f0'
    b'f0f0f","signature":"dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd'
    b'dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd","timing":{'
    b'"acked_ns":20,"arrival_stamp":"read","arrived_ns":70000,"deadline_s":2.0,"echo_s'
    b'amples_s":[0.0008],"job_sent_ns":10,"probe_missed":0,"probe_rtt_s":null,"probe_s'
    b'amples_s":[],"probe_wrong":0,"processed_ns":71000,"release_end_ns":340,"release_'
    b'index":0,"release_start_ns":300,"rtt_s":0.0009}},"ed25519:f":{"gateway":"gw-3"},'
    b'"release_skew_ns":42},"type":"round"}'
)
OLD_GATEWAY_ROWS: list[dict[str, Any]] = [
    {
        "node_key": "ed25519:e",
        "session_id": "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f",
        "released_ns": 300,
        "arrived_ns": 70000,
        "rtt_s": 0.0009,
        "outputs": [[5, 6]],
        "commitment": "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
        "signature": "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",
        "error": None,
        "extra": {
            "acked_ns": 20,
            "arrival_stamp": "read",
            "deadline_s": 2.0,
            "echo_samples_s": [0.0008],
            "job_sent_ns": 10,
            "probe_missed": 0,
            "probe_rtt_s": None,
            "probe_samples_s": [],
            "probe_wrong": 0,
            "processed_ns": 71000,
            "release_end_ns": 340,
            "release_index": 0,
            "release_start_ns": 300,
            "clock_offset_s": 0.00025,
        },
    },
    {
        "node_key": "ed25519:f",
        "session_id": None,
        "released_ns": None,
        "arrived_ns": None,
        "rtt_s": None,
        "outputs": None,
        "commitment": None,
        "signature": None,
        "error": None,
        "extra": {"gateway": "gw-3"},
    },
]


def _replay(tmp_path: Path, round_id: str, line: bytes) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'n.db'}")
    store.record_plan(RoundPlan(round_id, "p", 2, 2, (), ()), 1.0)
    spool = tmp_path / "spool.jsonl"
    spool.write_bytes(line + b"\n")
    report = Recorder(store, spool).replay()
    assert len(report.replayed) == 1
    assert not (report.failed or report.bad or report.conflicts or report.waiting)
    return store


def _rows(store: Store, round_id: str, keys: list[str]) -> list[dict[str, Any]]:
    rows = [store.result_row(round_id, k) or {} for k in keys]
    return [{k: v for k, v in r.items() if k not in ("id", "round_id")} for r in rows]


def test_old_round_entry_replays_to_the_old_rows(tmp_path: Path) -> None:
    """A coordinator's round entry written by the old code stores the same result and
    verdict rows, and finishes the round ``recorded-late``."""
    store = _replay(tmp_path, "R7", OLD_ROUND_ENTRY)
    assert _rows(store, "R7", [r["node_key"] for r in OLD_ROUND_ROWS]) == OLD_ROUND_ROWS
    vkeys = ("node_key", "verdict", "reason", "elapsed_s", "canaries_checked",
             "canaries_matched", "passed")  # fmt: skip
    stored = [tuple(v[k] for k in vkeys) for v in store.round_verdicts("R7")]
    assert stored == OLD_ROUND_VERDICTS
    (rnd,) = store.list_rounds()
    assert rnd["status"] == "recorded-late" and rnd["summary"]["total_s"] == 1.5
    store.close()


def test_old_gateway_entry_replays_to_the_old_rows(tmp_path: Path) -> None:
    """A gateway's entry in the old mapping forms stores the same rows and round timing."""
    store = _replay(tmp_path, "R9", OLD_GATEWAY_ENTRY)
    assert _rows(store, "R9", [r["node_key"] for r in OLD_GATEWAY_ROWS]) == OLD_GATEWAY_ROWS
    assert store.list_rounds()[0]["timing"] == {"release_skew_ns": 42}
    store.close()


def test_unreadable_record_fails_its_entry_and_keeps_it(tmp_path: Path) -> None:
    """A spooled record that cannot be read (bad hex) fails its entry with the node
    named; the entry stays in the spool (nothing is lost)."""
    store = Store(f"sqlite:///{tmp_path / 'n.db'}")
    store.record_plan(RoundPlan("R9", "p", 2, 2, (), ()), 1.0)
    rec = Recorder(store, tmp_path / "spool.jsonl")
    entry = {"type": "round", "id": "R9/end", "round_id": "R9", "outcomes": [],
             "timings": {"ed25519:x": {"signature": "not hex"}}, "status": None,
             "summary": {}, "finished_at": 1.0, "canary_ids": [], "spooled_at": 1.0,
             "reason": "test"}  # fmt: skip
    rec.spool.append(entry)
    report = rec.replay()
    assert "ed25519:x" in report.failed["R9/end"] and "not hex" in report.failed["R9/end"]
    assert [e["id"] for e in rec.spool.read().pending] == ["R9/end"]
    store.close()
