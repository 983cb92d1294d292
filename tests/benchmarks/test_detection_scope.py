"""The measured H200 class of ``benchmarks/detection.py`` and the capacity gate of
``benchmarks/detection_scope.py`` (EMULATION)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import detection  # noqa: E402
import detection_scope  # noqa: E402


@pytest.mark.parametrize("rule", ["card", "derived"])
def test_the_h200_class_is_one_the_gate_admits_and_the_base_class_is_not(rule: str) -> None:
    # the simulated class the product ships must be one its capacity gate accepts (the
    # real profile's margin is 1.375), and the base class one it refuses
    _, margin, safe = detection_scope.class_gate(detection.H200, rule)  # type: ignore[arg-type]
    assert safe and 1.2 <= margin < 1.5
    _, margin, safe = detection_scope.class_gate(detection.BASE, rule)  # type: ignore[arg-type]
    assert not safe and margin < 1.0


def test_every_h200_scenario_is_the_measured_class() -> None:
    h200 = [s for s in detection.scenarios() if s.name.startswith("h200 ")]
    assert {s.adversary for s in h200} >= {"plain", "jitter", "pad", "selective"}
    for s in h200:
        assert (s.spec.sigma_w, s.spec.beta, s.spec.speed_sd) == (0.01, 0.9, 0.01)
        assert not s.grid  # not the grid: G1 is unchanged
        # a faster card than the class is not the claimed class (G2)
        assert s.claimed_class == (s.spec.backend_speedup == 1.0)


def test_shipped_class_lines_come_from_the_h200_rows_only() -> None:
    scs = detection.scenarios()
    h200 = next(s for s in scs if s.name == "h200 plain")
    rows = detection.run_scenario(h200, "new", 1, max_rounds=32)
    lines = detection.shipped_class(rows, scs, "new")
    assert lines[0].startswith("plain/jitter pairs found by 16 rounds: h200 plain ")
    assert "h200 plain k=2" in lines[1]
    assert lines[2].startswith("honest nodes flagged by 32 rounds: ")
    other = next(s for s in scs if s.name == "small n=6 pair")
    assert detection.shipped_class(detection.run_scenario(other, "new", 1, max_rounds=20),
                                   scs, "new") == []  # fmt: skip
