"""``slow`` flags in the coordinator (netcheck.coordinator.checks.slowness): stored
rounds -> the persistent-slowness test -> a flag with readable evidence, once per
window; on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from netcheck.analysis.schedule import rule_name
from netcheck.analysis.slowness import (
    SlownessConfig,
    persistent_slowness,
    sign_test_p,
    slowness_evidence,
)
from netcheck.config import CapacityRecord, CoordinatorConfig, Profile
from netcheck.coordinator import checks
from netcheck.coordinator.detection import Screening
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


def store_round(
    fs: FlagStore, rid: str, kind: str, rule: str = "explicit",
    nodes: dict[str, float] = NODES, profile: Profile = PROFILE,
) -> None:  # fmt: skip
    """A complete round loading every node of ``nodes`` at its service time, its
    schedule stored with ``rule``."""
    assignments = tuple(Assignment(k, ("a",), (), (), (), bytes(32), bytes(12)) for k in nodes)
    fs.store.record_plan(RoundPlan(rid, profile.name, 4, 4, assignments, ()), 1.0)
    fs.record_schedule(rid, profile.name, kind, rule, dict.fromkeys(nodes, True))
    outcomes = [NodeOutcome(k, Verdict.PASS, "ok", 0.5, 0, 0) for k in nodes]
    records = {
        k: NodeRecord(
            NodeTiming(release_start_ns=1_000, rtt_s=0.01,
                       arrived_ns=1_000 + round((r * T_REF + 0.01) * 1e9)),
            commitment=b"\x01" * 32, signature=b"\x02" * 64,
        )
        for k, r in nodes.items()
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


async def test_the_coordinator_judges_each_round_at_its_stored_load_probability(
    flags: FlagStore, tmp_path: Path
) -> None:
    """The coordinator's slowness test (Screening._slowness) reads each round's stored
    rule: 24 screening rounds, the first 16 stored at q = 2/3 and the last 8 at 1/2,
    judged after the setting moved to 1/2. Node ``c`` is above the floor in 20 of them:
    at the configured 1/2 p = 0.00077 <= the look-2 level 0.0015 (the defect; the same
    rounds stored at 1/2 in another profile: flagged), at the stored 2/3 p = 0.059 (not
    flagged). The padded node's flag records the mixes and the rate (direct_flags)."""
    cfg = CoordinatorConfig(identity_key=tmp_path / "c.pem", open_enrollment=True,
                            admin_token="x" * 16, profiles=[PROFILE.name],
                            screening_load_probability=0.5)  # fmt: skip
    screening = Screening(SimpleNamespace(config=cfg, flags=flags))  # type: ignore[arg-type]
    screening.slowness = SlownessConfig(direct_flags=True)
    steady = small_profile("slowq")
    for i in range(24):
        nodes = {"pad": 1.6, "c": 1.3 if i % 6 else 1.1, "n1": 1.0, "n2": 1.05, "n3": 0.95}
        store_round(flags, f"m{i:02d}", "screening", rule_name(2 / 3 if i < 16 else 0.5), nodes)
        store_round(flags, f"s{i:02d}", "screening", rule_name(0.5), nodes, steady)
    stored = flags.recent_rounds(PROFILE.name, ("screening",), 128)
    ids, report = await screening._slowness(PROFILE, stored)
    c = next(n for n in report.nodes if n.node_key == "c")
    assert (c.above, c.n, report.look) == (20, 24, 2)
    assert c.mixes == ((0.5, 8), (2 / 3, 16)) and c.null_rate == 2 / 3
    assert c.p_value == sign_test_p(20, 24, 2 / 3) and not c.flagged
    assert [n.node_key for n in report.flagged] == ["pad"]
    [flag] = [f for f in (flags.get_flag(i) for i in ids) if f is not None]
    ev = flag.evidence or {}
    assert flag.node_keys == ("pad",) and ev["null_rate"] == 2 / 3
    assert ev["load_probability"] == 0.5 and ev["q_from_config"] == []
    assert [(m["load_probability"], m["rounds"]) for m in ev["mixes"]] == [(0.5, 8), (2 / 3, 16)]
    assert "0.667 of them" in ev["rule"]
    at_half = flags.recent_rounds(steady.name, ("screening",), 128)
    _, before = await screening._slowness(steady, at_half)
    assert [n.node_key for n in before.flagged] == ["c", "pad"] and before.null_rate == 0.5


def _screening(flags: FlagStore, tmp_path: Path, **fields: object) -> Screening:
    cfg = CoordinatorConfig(identity_key=tmp_path / "c.pem", open_enrollment=True,
                            admin_token="x" * 16, profiles=[PROFILE.name],
                            **fields)  # type: ignore[arg-type]  # fmt: skip
    return Screening(SimpleNamespace(config=cfg, flags=flags))  # type: ignore[arg-type]


def test_the_default_config_gives_the_library_settings(flags: FlagStore, tmp_path: Path) -> None:
    """Without the ``slowness_*`` fields the coordinator's test runs at
    ``SlownessConfig()`` (floor 1.25, alpha 0.01, min_rounds 8): defaults unchanged."""
    assert _screening(flags, tmp_path).slowness == SlownessConfig()


async def test_the_coordinator_judges_with_the_configured_slowness_floor(
    flags: FlagStore, tmp_path: Path
) -> None:
    """``slowness_floor`` reaches the running test (Screening._slowness): node ``c`` at
    1.3 t_ref in all 16 screening rounds (q 2/3: p = (2/3)^16 = 0.0015 <= the look-1 level
    0.0061) is rejected, so an alone-stage candidate, at the default floor 1.25, and
    not at 1.4 (no round above it: p = 1); the report and the rejection's evidence carry
    the floor. ``slowness_alpha`` and ``slowness_min_rounds`` reach it too."""
    nodes = {"c": 1.3, "n1": 1.0, "n2": 1.05, "n3": 0.95}
    for i in range(16):
        store_round(flags, f"f{i:02d}", "screening", rule_name(2 / 3), nodes)
    stored = flags.recent_rounds(PROFILE.name, ("screening",), 128)
    _, default = await _screening(flags, tmp_path)._slowness(PROFILE, stored)
    assert default.floor == 1.25 and default.look == 1
    assert [n.node_key for n in default.flagged] == ["c"]
    c = default.flagged[0]
    assert (c.above, c.n, c.p_value) == (16, 16, sign_test_p(16, 16, 2 / 3))
    assert slowness_evidence(c, default, stored.results)["floor"] == 1.25
    raised = _screening(flags, tmp_path, slowness_floor=1.4)
    _, report = await raised._slowness(PROFILE, stored)
    assert report.floor == 1.4 and report.reference_ok
    c = next(n for n in report.nodes if n.node_key == "c")
    assert (c.above, c.p_value, c.flagged, report.flagged) == (0, 1.0, False, ())
    other = _screening(flags, tmp_path, slowness_alpha=0.2, slowness_min_rounds=17)
    _, report = await other._slowness(PROFILE, stored)
    assert (report.alpha, report.min_rounds, report.nodes) == (0.2, 17, ())


async def test_a_population_above_the_floor_is_reported_naming_slowness_floor(
    flags: FlagStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every node at 1.3-1.35 t_ref: at the default floor the reference check fails
    (nothing rejected) and the warning names ``slowness_floor``; at 1.4 the population
    is within it."""
    nodes = {"a": 1.3, "b": 1.32, "c": 1.35}
    for i in range(8):
        store_round(flags, f"p{i:02d}", "screening", rule_name(2 / 3), nodes)
    stored = flags.recent_rounds(PROFILE.name, ("screening",), 128)
    _, report = await _screening(flags, tmp_path)._slowness(PROFILE, stored)
    assert not report.reference_ok and report.flagged == ()
    assert "above the floor 1.25 (slowness_floor)" in caplog.text
    assert f"`netcheck engine pool ... --update-profile {PROFILE.name}`" in caplog.text
    assert "or raise slowness_floor in the coordinator config" in caplog.text
    _, report = await _screening(flags, tmp_path, slowness_floor=1.4)._slowness(PROFILE, stored)
    assert report.reference_ok and report.population_median_ratio == pytest.approx(1.32)
