"""``benchmarks/detection.py --max-rounds``: a shorter run stops at its last checkpoint
(EMULATION); ``--list`` names the scenarios."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import detection  # noqa: E402


def test_max_rounds_stops_at_the_last_checkpoint() -> None:
    sc = next(s for s in detection.scenarios() if s.name == "small n=6 pair")
    short = detection.run_scenario(sc, "new", 1, max_rounds=20)
    assert [r["rounds"] for r in short] == [16]
    full = detection.run_scenario(sc, "new", 1, max_rounds=None)
    assert [r["rounds"] for r in full] == list(detection.ROUNDS)
    # the same seed: the shared checkpoint reads the same
    assert short[0]["found2"] == full[0]["found2"]
    assert short[0]["conf"] == full[0]["conf"]


def test_speed_sd_changes_the_population_and_the_name() -> None:
    sc = next(s for s in detection.scenarios() if s.name == "pad b=0.3")
    assert detection.at_speed(sc, None) is sc
    tight = detection.at_speed(sc, 0.01)
    assert tight.name == "pad b=0.3 sp=0.01"
    assert tight.spec.speed_sd == 0.01 and sc.spec.speed_sd == 0.05
    assert tight.spec.beta == sc.spec.beta and tight.spec.adversary == "pad"
    pops = [detection.make_population(s.spec, detection.np.random.default_rng([0, 1]))
            for s in (sc, tight)]  # fmt: skip
    spread = [float(detection.np.std(detection.np.log(p.speed))) for p in pops]
    assert spread[1] < spread[0] / 2


def test_list_prints_the_selected_scenario_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--list`` prints the names the filters select and runs nothing: ``--only h200``
    gives the measured H200 class's scenarios (``--scenario`` takes these exact names)."""
    monkeypatch.setattr(sys, "argv", ["detection.py", "--only", "h200", "--list"])
    assert detection.main() == 0
    names = capsys.readouterr().out.splitlines()
    assert names == [s.name for s in detection.scenarios() if s.name.startswith("h200 ")]
    assert "h200 plain" in names and "h200 honest only, 30 pairs at 20%" in names
