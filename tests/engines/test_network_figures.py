"""--rtt-jitter-s / --max-rtt-s of `engine calibrate` and `engine pool` must be finite
numbers >= 0. NaN passed the old `< 0` test: calibrate measured for minutes (41 s on a
CPU for cpu-tiny, far longer on a GPU) and then failed with a raw pydantic error
("1 validation error for DeadlineParams slack_s ..."); inf likewise."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_calibrate_pool import FAST, SLOW, _record

from netcheck.capacity import derive_deadline
from netcheck.cli import main
from netcheck.config import load_profile
from netcheck.engines.calibrate import run_calibration

BAD = [math.nan, math.inf, -0.01]


@pytest.mark.parametrize("value", BAD, ids=["nan", "inf", "negative"])
@pytest.mark.parametrize("field", ["rtt_jitter_s", "max_rtt_s"])
def test_calibrate_refuses_bad_network_figures_before_measuring(field: str, value: float) -> None:
    """Refused at the start: nothing is measured (the first progress report would stop
    the test with 'measuring started')."""

    def started(text: str, frac: float) -> None:
        raise AssertionError(f"measuring started: {text}")

    figures = {"rtt_jitter_s": 0.01, "max_rtt_s": 0.05, field: value}
    with pytest.raises(ValueError, match=f"{field} must be a finite number >= 0"):
        run_calibration(load_profile("cpu-tiny"), selftest=False, progress=started, **figures)


@pytest.mark.parametrize("value", BAD, ids=["nan", "inf", "negative"])
def test_derive_deadline_refuses_bad_network_figures(value: float) -> None:
    with pytest.raises(ValueError, match="rtt_jitter_s must be a finite number >= 0"):
        derive_deadline([1.0, 1.1], rtt_jitter_s=value, max_rtt_s=0.05)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_engine_pool_refuses_a_non_finite_override(tmp_path: Path, value: str) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_record("H200 GPU-a", FAST, [1.005, 1.9])))
    b.write_text(json.dumps(_record("H200 GPU-b", SLOW, [1.064, 2.0])))
    result = CliRunner().invoke(
        main, ["engine", "pool", str(a), str(b), "--out", str(tmp_path), "--rtt-jitter-s", value]
    )
    assert result.exit_code == 2, result.output
    assert "rtt_jitter_s must be a finite number >= 0" in result.output
    assert "pydantic" not in result.output
