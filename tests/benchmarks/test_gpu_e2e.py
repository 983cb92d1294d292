"""``benchmarks/gpu_e2e.py``'s screening phases: the identity tables of the farm phases
``s1p`` (padding) and ``s1s`` (selective), which identities share a node process, the
per-round table and verdict counts of the summary, and (marked ``slow``) the phases run
end to end on the CPU (``--cards 0``, the ``cpu-tiny`` engine, real node processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_e2e  # noqa: E402


def test_the_farm_phases_are_screening_phases_that_stop_at_the_first_flag() -> None:
    for phase, kind in (("s1p", "padding"), ("s1s", "selective")):
        assert phase in gpu_e2e.SCREENING_PHASES and phase in gpu_e2e.FIRST_FLAG_PHASES
        specs = gpu_e2e.PHASES[phase]
        assert [(label, k, card) for label, k, card in specs] == [
            ("shared-A-card0", kind, "0"), ("shared-B-card0", kind, "0")
        ]  # fmt: skip
    for phase in ("s", "s1", "s1j"):  # the sessions 9-15 records: shared-backend stops them
        assert phase not in gpu_e2e.FIRST_FLAG_PHASES


def test_selective_identities_share_one_process_the_others_have_their_own() -> None:
    assert gpu_e2e.node_processes(gpu_e2e.PHASES["s1s"]) == [[0, 1]]
    assert gpu_e2e.node_processes(gpu_e2e.PHASES["s1p"]) == [[0], [1]]
    assert gpu_e2e.node_processes(gpu_e2e.PHASES["s"]) == [[0], [1], [2]]
    mixed = [("A", "selective", "0"), ("h", "honest", "1"), ("B", "selective", "0"),
             ("C", "selective", "1")]  # fmt: skip
    assert gpu_e2e.node_processes(mixed) == [[0, 2], [1], [3]]


def test_round_table_splits_verdicts_by_co_load_of_the_farm() -> None:
    labels = {"kA": "shared-A-card0", "kB": "shared-B-card0", "kh": "honest-card1"}
    farm = {"kA", "kB"}
    rounds = ("r1", "r2", "r3", "r4")
    kinds = {"r1": "full", "r2": "screening", "r3": "screening", "r4": "confirmation"}
    schedules = {
        "r1": {"kA": True, "kB": True, "kh": True},
        "r2": {"kA": False, "kB": True, "kh": True},
        "r3": {"kA": False, "kB": False, "kh": False},  # nobody of ours: left out
        "r4": {"kA": True, "kB": True, "kh": False},
    }
    verdicts = {
        "kA": [{"round_id": "r1", "verdict": "pass", "elapsed_s": 2.2},
               {"round_id": "r4", "verdict": "late", "elapsed_s": 4.61234,
                "reason": "4.612 s after release, deadline 3.045 s"}],
        "kB": [{"round_id": "r1", "verdict": "missing", "elapsed_s": None},
               {"round_id": "r2", "verdict": "pass", "elapsed_s": 2.4},
               {"round_id": "r4", "verdict": "missing", "elapsed_s": None}],
        "kh": [{"round_id": "r1", "verdict": "pass", "elapsed_s": 2.1},
               {"round_id": "r2", "verdict": "pass", "elapsed_s": 2.15}],
    }  # fmt: skip
    table, counts = gpu_e2e.round_table(rounds, kinds, schedules, verdicts, labels, farm)
    assert [r["round_id"] for r in table] == ["r1", "r2", "r4"]
    assert table[0]["farm_loaded"] == 2 and table[1]["farm_loaded"] == 1
    assert table[1]["loaded"] == ["honest-card1", "shared-B-card0"]
    assert table[2]["shared-A-card0"] == {
        "verdict": "late", "elapsed_s": 4.6123, "reason": "4.612 s after release, deadline 3.045 s"
    }  # fmt: skip
    assert table[0]["shared-B-card0"] == {"verdict": "missing", "elapsed_s": None}
    assert counts["shared-B-card0"] == {
        "full co-loaded": {"missing": 1}, "screening alone": {"pass": 1},
        "confirmation co-loaded": {"missing": 1},
    }  # fmt: skip
    assert counts["shared-A-card0"] == {"full co-loaded": {"pass": 1},
                                         "confirmation co-loaded": {"late": 1}}  # fmt: skip
    # an identity outside the farm is never "co-loaded"
    assert counts["honest-card1"] == {"full alone": {"pass": 1}, "screening alone": {"pass": 1}}


def test_farm_flag_seen_needs_a_farm_identity() -> None:
    farm = ["shared-A-card0", "shared-B-card0"]
    assert not gpu_e2e.farm_flag_seen([{"nodes": ["honest-card1"]}], farm)
    assert gpu_e2e.farm_flag_seen([{"nodes": ["honest-card1"]}, {"nodes": [farm[1]]}], farm)
    assert not gpu_e2e.farm_flag_seen([], farm)


# -- end to end on the CPU ---------------------------------------------------------------


def _run(args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_e2e.py"), *args],
        capture_output=True, text=True, timeout=timeout_s, cwd=ROOT,
    )  # fmt: skip


def _tight_profile(tmp_path: Path) -> Path:
    """cpu-tiny with a deadline of 1.0 s (t_ref 0.5 s, a 1, slack 0.5 s)."""
    text = (ROOT / "configs" / "profiles" / "cpu-tiny.toml").read_text()
    text = text.replace("t_ref_s = 2.0 ", "t_ref_s = 0.5 ").replace("a = 1.5\n", "a = 1.0\n")
    path = tmp_path / "cpu-tiny.toml"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_s1s_on_the_cpu_b_is_missing_exactly_when_a_is_loaded(tmp_path: Path) -> None:
    """Phase ``s1s`` with real node processes: B gives its batch up (``missing``) in every
    round that loads A, passes alone; A passes; the run stops at the first farm flag or
    after 16 screening rounds; the JSON has the flags, the rounds and the counts."""
    profile, db, out = (
        ROOT / "configs/profiles/cpu-tiny.toml",
        tmp_path / "r.db",
        tmp_path / "o.json",
    )
    assert _run(["build", "--profile", str(profile), "--db", str(db), "--count", "160"],
                120).returncode == 0  # fmt: skip
    r = _run(["rounds", "--profile", str(profile), "--db", str(db), "--phases", "s1s",
              "--screen-rounds", "16", "--cards", "0", "--json", str(out)], 300)  # fmt: skip
    result = json.loads(out.read_text())
    phase = result["phases"][0]
    assert phase["phase"] == "s1s", r.stdout[-2000:]
    summ = phase["summary"]
    for row in phase["rounds_table"]:
        if "shared-B-card0" not in row["loaded"]:
            continue
        want = "missing" if row["farm_loaded"] == 2 else "pass"
        assert row["shared-B-card0"]["verdict"] == want, row
        if "shared-A-card0" in row["loaded"]:
            assert row["shared-A-card0"]["verdict"] == "pass", row
    first = summ["first_farm_flag"]
    if first is None:  # possible (the coins), but then every round ran
        assert summ["screening_rounds"] == 16
    else:  # stopped at the round of the first flag
        assert summ["screening_rounds"] == first["screening_rounds"] <= 16
        assert first["stage"] == "round" and first["nodes"] == ["shared-B-card0"]
        assert first["kind"] == "capacity"
    assert summ["honest_flagged"] == []
    assert result["all_as_expected"] == (first is not None) == (r.returncode == 0)


@pytest.mark.slow
def test_s1p_on_the_cpu_every_answer_is_held_to_just_before_the_deadline(
    tmp_path: Path,
) -> None:
    """Phase ``s1p`` with real node processes at a 1.0 s deadline: no answer arrives
    before 0.9 s (1.0 s less the 100 ms safety), so the padding of the job's deadline
    reaches the node; the JSON has the per-round times."""
    profile, db, out = _tight_profile(tmp_path), tmp_path / "r.db", tmp_path / "o.json"
    assert _run(["build", "--profile", str(profile), "--db", str(db), "--count", "64"],
                120).returncode == 0  # fmt: skip
    r = _run(["rounds", "--profile", str(profile), "--db", str(db), "--phases", "s1p",
              "--screen-rounds", "4", "--cards", "0", "--json", str(out)], 300)  # fmt: skip
    result = json.loads(out.read_text())
    assert result["deadline_s_rtt0"] == pytest.approx(1.0)
    phase = result["phases"][0]
    assert phase["phase"] == "s1p", r.stdout[-2000:]
    times = [row[lab]["elapsed_s"] for row in phase["rounds_table"]
             for lab in ("shared-A-card0", "shared-B-card0") if lab in row]  # fmt: skip
    assert times, phase["rounds_table"]
    assert min(t for t in times if t is not None) >= 0.9
    assert phase["summary"]["verdict_counts"].keys() == {"shared-A-card0", "shared-B-card0"}
