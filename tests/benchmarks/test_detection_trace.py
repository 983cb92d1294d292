"""benchmarks/detection_trace.py: the per-pair trace agrees with the simulation it
traces (its mutual test is the analysis's, its flags the benchmark's ``found``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def trace() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the script imports benchmarks/detection.py
    spec = importlib.util.spec_from_file_location("detection_trace", BENCH / "detection_trace.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["detection_trace"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_small_pair_is_nominated_confirmed_and_found(trace: ModuleType) -> None:
    rows, found, levels = trace.trace_cell("small n=6 pair", "new", [0], rounds=16, ideal=True)
    assert len(rows) == 1
    _, row = rows[0]
    assert row["hit"] and row["floors"] and row["z"] > row["z_level"]
    assert row["groups"] == ["AB"]
    assert row["runs"][0].startswith("flag(") and row["flagged"]
    assert found == {16: [True]}
    assert "ideal_hit" in row
    assert levels[0]["hit farm2"] == levels[0]["nominable farm2"] == 1
    assert levels[0]["nominable cohost"] + levels[0]["nominable other"] < 15


def test_trace_agrees_with_the_run(trace: ModuleType) -> None:
    """Every mutual edge of the analysis is a hit of the trace's recomputed test, with
    the same z, and
    the pairs flagged at the last analysis are the benchmark's found pairs."""
    rows, found, levels = trace.trace_cell("jitter n=200 s=0.15 b=0.5", "new", [0], rounds=16)
    assert len(rows) == 8
    for _, row in rows:
        if row["edge"] == "A-mutual":  # the analysis's own z on the same residuals
            assert row["hit"] and row["edge_stat"] == pytest.approx(row["z"], abs=1e-9)
        if row["hit"]:
            assert any(g.startswith("AB") for g in row["groups"])
    assert [row["flagged"] for _, row in rows] == found[16]
    assert any(row["edge"] == "A-mutual" for _, row in rows)
    assert levels[0]["hit farm2"] == sum(row["hit"] for _, row in rows)
    counts = trace.summary(rows)[16]
    assert counts["pairs"] == 8 and counts["flagged_by_now"] == sum(found[16])


def test_help(trace: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        trace.main(["--help"])
    assert exc.value.code == 0
    assert "--per-pair" in capsys.readouterr().out
