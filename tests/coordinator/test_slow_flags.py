"""``slow`` flags in the coordinator (netcheck.coordinator.checks.slowness): stored
rounds -> the persistent-slowness test -> a flag with readable evidence, once per
window; on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from netcheck.analysis.slowness import SlownessConfig, persistent_slowness
from netcheck.config import CapacityRecord
from netcheck.coordinator import checks
from netcheck.lab.testing import small_profile
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
from netcheck.storage.flags import FlagStore

PROFILE = small_profile("slowp")  # t_ref from the deadline; [capacity] t(1) wins below
T_REF = PROFILE.reference_t_s
NODES = {"pad": 1.5, "n1": 1.0, "n2": 1.05, "n3": 0.95}  # service time / t_ref


@pytest.fixture
def flags(db_url: str) -> FlagStore:
    return FlagStore(Store(db_url))


def store_round(fs: FlagStore, rid: str, kind: str) -> None:
    """A complete round loading every node of NODES at its service time."""
    assignments = tuple(Assignment(k, ("a",), (), (), (), bytes(32), bytes(12)) for k in NODES)
    fs.store.record_plan(RoundPlan(rid, PROFILE.name, 4, 4, assignments, ()), 1.0)
    fs.record_schedule(rid, PROFILE.name, kind, "explicit", dict.fromkeys(NODES, True))
    outcomes = [NodeOutcome(k, Verdict.PASS, "ok", 0.5, 0, 0) for k in NODES]
    records = {
        k: NodeRecord(
            NodeTiming(release_start_ns=1_000, rtt_s=0.01,
                       arrived_ns=1_000 + round((r * T_REF + 0.01) * 1e9)),
            commitment=b"\x01" * 32, signature=b"\x02" * 64,
        )
        for k, r in NODES.items()
    }  # fmt: skip
    fs.store.record_outcome(rid, outcomes, records)
    fs.store.finish_round(rid, "complete", {})


def test_a_padded_node_gets_one_slow_flag_per_window(flags: FlagStore) -> None:
    """With ``direct_flags`` (the behaviour before session 6) the node at 1.5 t_ref in
    every screening round gets a confirmed ``slow`` flag with its rule, counts and
    receipts; the same window again raises nothing; the round count the look is derived
    from counts the profile's rounds of the given kinds. By default the test's
    rejection raises no flag here (the alone stage judges it)."""
    for i in range(16):
        store_round(flags, f"r{i:02d}", "full" if i % 4 == 3 else "screening")
    assert flags.count_rounds(PROFILE.name, ("screening", "full")) == 16
    assert flags.count_rounds(PROFILE.name, ("screening",)) == 12
    stored = flags.recent_rounds(PROFILE.name, ("screening",), 128)
    default = persistent_slowness(stored, T_REF, look=1)
    assert [n.node_key for n in default.flagged] == ["pad"]
    assert checks.slowness(flags, PROFILE, stored, default) == []
    report = persistent_slowness(stored, T_REF, look=1, cfg=SlownessConfig(direct_flags=True))
    [fid] = checks.slowness(flags, PROFILE, stored, report)
    flag = flags.get_flag(fid)
    assert flag is not None and flag.evidence is not None
    assert (flag.kind, flag.status, flag.node_keys) == ("slow", FlagStatus.CONFIRMED, ("pad",))
    assert flag.statistic == pytest.approx(0.5**12) and flag.threshold == report.level
    ev = flag.evidence
    assert (ev["above"], ev["n"], ev["t_ref_s"]) == (12, 12, T_REF)
    assert len(ev["receipts"]) == 12 and "sign test" in ev["rule"]
    assert checks.slowness(flags, PROFILE, stored, report) == []  # covered: not again


def test_reference_time_is_the_calibrated_t1() -> None:
    """``Profile.reference_t_s``: [capacity] t(1) when recorded, else deadline.t_ref_s."""
    cap = CapacityRecord(t_s=[0.7, 1.2], margin=1.3, card="cpu", date="2026-11-30")
    assert small_profile("a").reference_t_s == small_profile("a").deadline.t_ref_s
    assert small_profile("b", capacity=cap).reference_t_s == 0.7
