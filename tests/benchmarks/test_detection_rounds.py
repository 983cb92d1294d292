"""``benchmarks/detection.py --max-rounds``: a shorter run stops at its last checkpoint
(EMULATION)."""

from __future__ import annotations

import sys
from pathlib import Path

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
