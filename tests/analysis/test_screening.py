"""netcheck.analysis.screening (pure): planning, rows, analysis, strikes, relay."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netcheck.analysis.detectors import DetectorConfig
from netcheck.analysis.schedule import screening_plan
from netcheck.analysis.screening import (
    analyse,
    capacity_check,
    confirmation_observation,
    hmac_load_rule,
    probe_pairs,
    relay_check,
    round_kind,
    timing_rows,
)
from netcheck.lab.sim.pipeline import simulate_screening
from netcheck.lab.sim.population import PopulationSpec, make_population
from netcheck.records import StoredRounds

SECRET = bytes(range(32))


def _row(rid: str, node: str, released: int | None, arrived: int | None, commit: bool = True):  # type: ignore[no-untyped-def]
    return {"round_id": rid, "node_key": node, "released_ns": released, "arrived_ns": arrived,
            "rtt_s": 0.01, "commitment": "ab" if commit else None}  # fmt: skip


def test_round_kind_mixes_full_rounds() -> None:
    """Every full_every-th screening round is a full-load round."""
    assert [round_kind(i, 4) for i in range(8)] == ["screening"] * 3 + ["full"] + [
        "screening"
    ] * 3 + ["full"]
    assert {round_kind(i, 1) for i in range(5)} == {"full"}
    with pytest.raises(ValueError):
        round_kind(-1, 4)


def test_hmac_load_rule_is_the_secret_schedule() -> None:
    """The load rule loads exactly the nodes whose HMAC schedule bit is set."""
    keys = [f"n{i}" for i in range(64)]
    got = hmac_load_rule(SECRET)("r1", keys)
    want = {k for k, b in screening_plan(SECRET, "r1", keys).items() if b}
    assert got == want
    assert 16 < len(got) < 48  # about half
    assert hmac_load_rule(SECRET)("r2", keys) != got


def test_timing_rows_use_effective_load_and_raw_times() -> None:
    """Loaded = schedule bit and a release; an error reply is no result; times stay raw."""
    stored = StoredRounds(
        ("r1",), {"r1": "screening"},
        {"r1": {"a": True, "b": True, "c": True, "d": False}},
        (_row("r1", "a", 100, 900), _row("r1", "b", None, None),
         _row("r1", "c", 100, 150, commit=False)),
    )  # fmt: skip
    rows = {r.node_key: r for r in timing_rows(stored)}
    assert rows["a"].loaded and (rows["a"].released_ns, rows["a"].arrived_ns) == (100, 900)
    assert not rows["b"].loaded  # never released: computed nothing
    assert rows["c"].loaded and rows["c"].arrived_ns is None  # censored later
    assert "d" not in rows


def test_analyse_finds_a_simulated_farm() -> None:
    """Stored-row analysis flags a shared pair among simulated nodes, no honest pair."""
    rng = np.random.default_rng(7)
    spec = PopulationSpec(n_nodes=30, farm_sizes=(2,), cohosted_pairs=0, sigma_w=0.03, beta=1.0)
    pop = make_population(spec, rng)
    scr = simulate_screening(pop, 40, rng)
    schedules: dict[str, dict[str, bool]] = {}
    results = []
    for r in scr.rows:
        schedules.setdefault(r.round_id, {})[r.node_key] = r.loaded
        if r.loaded:
            results.append(_row(r.round_id, r.node_key, r.released_ns, r.arrived_ns))
            results[-1]["rtt_s"] = r.rtt_s
    stored = StoredRounds(
        scr.round_ids, dict.fromkeys(scr.round_ids, "screening"), schedules, tuple(results)
    )
    # screening level 0.01 (the default 0.5 nominates an honest pair in about half of
    # the analyses by design: confirmation, not screening, bounds false flags)
    got = analyse(stored, 3 * spec.t_ref_s, DetectorConfig(alpha=0.01))
    assert [set(g.members) for g in got.detection.groups] == [set(pop.farms[0])]
    assert got.matrix.y.shape == (30, 40)


def test_confirmation_observation_from_rows() -> None:
    """A confirmation round gives log service times of its loaded nodes, censored if late."""
    obs = confirmation_observation(
        "c1", {"a": True, "b": True, "x": False},
        [_row("c1", "a", 0, 1_010_000_000), _row("c1", "b", 0, None), _row("c9", "a", 0, 5)],
        deadline_s=2.0,
    )  # fmt: skip
    assert obs.loaded == frozenset({"a", "b"})
    assert obs.log_service["a"] == pytest.approx(math.log(1.0))
    assert obs.log_service["b"] == pytest.approx(math.log(2.0))


def test_capacity_check_counts_window_only() -> None:
    """Strikes are late/missing verdicts among the window's most recent verdicts."""
    recent = [{"verdict": v, "round_id": f"r{i}"}
              for i, v in enumerate(["late", "pass", "missing", "late", "late"])]  # fmt: skip
    hits, failed = capacity_check(recent, window=3, strikes=2)
    assert [h["round_id"] for h in hits] == ["r0", "r2"] and failed
    hits, failed = capacity_check(recent, window=2, strikes=2)
    assert len(hits) == 1 and not failed


def _probe_rows(extra_s: float, n: int) -> list[dict[str, object]]:
    return [{"round_id": f"r{i}", "rtt_s": 0.01,
             "extra": {"probe_rtt_s": 0.01 + 0.005 + extra_s + i * 1e-4, "probe_missed": 0}}
            for i in range(n)]  # fmt: skip


def test_relay_check_needs_rounds_and_excess() -> None:
    """The probe relay test flags a persistent excess over echo RTT plus reference."""
    assert relay_check(probe_pairs(_probe_rows(0.03, 4)), 0.005) is None
    res = relay_check(probe_pairs(_probe_rows(0.03, 8)), 0.005)
    assert res is not None and res.flagged and res.median_excess_s == pytest.approx(0.03, abs=1e-3)
    res = relay_check(probe_pairs(_probe_rows(0.0, 8)), 0.005)
    assert res is not None and not res.flagged


def test_probe_pairs_skips_rows_without_echo_and_lists_unanswered() -> None:
    """Rows pair per round; probes missing with echoes answered are listed."""
    rows = [
        {"round_id": "a", "rtt_s": 0.01, "extra": {"probe_rtt_s": 0.02}},
        {"round_id": "b", "rtt_s": None, "extra": {"probe_rtt_s": 0.02}},
        {"round_id": "c", "rtt_s": 0.01, "extra": {"probe_rtt_s": None, "probe_missed": 1}},
        {"round_id": "d", "rtt_s": 0.01, "extra": None},
    ]
    pairs = probe_pairs(rows)
    assert pairs.round_ids == ("a",) and pairs.probe_rtts_s == (0.02,)
    assert pairs.echo_rtts_s == (0.01,) and pairs.unanswered == ("c",)


def test_hmac_load_rule_at_a_load_probability() -> None:
    """The coordinator's rule at q loads the schedule's nodes at q (about 2/3 here)."""
    keys = [f"n{i}" for i in range(300)]
    got = hmac_load_rule(SECRET, 2 / 3)("r1", keys)
    assert got == {k for k, b in screening_plan(SECRET, "r1", keys, 2 / 3).items() if b}
    assert got >= hmac_load_rule(SECRET)("r1", keys)  # nested in the 1/2 rule's set
    assert 170 < len(got) < 230
