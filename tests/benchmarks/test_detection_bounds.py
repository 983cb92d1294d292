"""benchmarks/detection_bounds.py: the model bound follows the load probability, and
its extremes (plain pairs ~1, jittered beta 0.3 pairs small) hold."""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from netcheck.config.coordinator import CoordinatorConfig

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "detection_bounds.py"


@pytest.fixture(scope="module")
def bounds() -> ModuleType:
    spec = importlib.util.spec_from_file_location("detection_bounds", PATH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["detection_bounds"] = mod
    spec.loader.exec_module(mod)
    return mod


def scenario(mod: ModuleType, name: str):  # type: ignore[no-untyped-def]
    (sc,) = mod.g1_scenarios([name])
    return sc.spec


def test_design_defaults_are_the_coordinators(bounds: ModuleType) -> None:
    fields = CoordinatorConfig.model_fields
    d = bounds.Design()
    assert d.q == fields["screening_load_probability"].default
    assert d.full_every == fields["screening_full_every"].default
    assert d.screening_rounds(16) == 16 - 16 // d.full_every
    assert d.looks() == 6  # doubling looks 8 ... 256 cycles


def test_variance_factor_follows_q(bounds: ModuleType) -> None:
    # row contrast: both loaded q^2 R_s vs only this node q (1 - q) R_s
    assert bounds.Design(q=0.5).variance_factor() == pytest.approx(8.0)
    assert bounds.Design(q=2 / 3).variance_factor() == pytest.approx(27 / 4)


def test_nomination_higher_at_two_thirds_than_half(bounds: ModuleType) -> None:
    spec = scenario(bounds, "jitter")
    half = bounds.nomination(spec, 16, bounds.Design(q=0.5))
    two3 = bounds.nomination(spec, 16, bounds.Design(q=2 / 3))
    assert two3["z"] / half["z"] == pytest.approx(math.sqrt(8 / 6.75))
    assert two3["p_bonf"] > half["p_bonf"] + 0.05
    assert two3["p_bh"] > half["p_bh"] + 0.05


def test_plain_pair_near_one_jitter_beta_03_small(bounds: ModuleType) -> None:
    plain = bounds.bounds(scenario(bounds, "plain"), 16)
    assert plain["p_bonf"] > 0.99 and plain["found"] > 0.99
    weak = bounds.bounds(scenario(bounds, "jitter n=200 s=0.05 b=0.3"), 16)
    assert weak["p_bh"] < 0.3 and weak["found"] < 0.05
    assert weak["cycles"] > bounds.Design().confirm_max_cycles  # not in one attempt


def test_effect_floor_binds_beta_03(bounds: ModuleType) -> None:
    # a plain beta 0.3 pair sits 0.039 above the floor: the floors, not z, limit it
    spec = scenario(bounds, "plain n=200 s=0.05 b=0.3")
    nom = bounds.nomination(spec, 16, bounds.Design())
    assert nom["z"] > 9 and nom["p_bonf"] < 0.95
    free = bounds.nomination(spec, 16, replace(bounds.Design(), detector=replace(
        bounds.Design().detector, effect_floor=0.0)))  # fmt: skip
    assert free["p_bonf"] > 0.99


def test_markdown_table(bounds: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bounds.main(["--rounds", "16", "--scenario", "plain", "--no-obs", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| scenario | margin |" in out
    row = next(line for line in out.splitlines() if line.startswith("| plain |"))
    assert row.count("|") == out.splitlines()[2].count("|")
    assert row.rstrip(" |").endswith("1.00")  # measured in session 10


def test_ideal_rows_runs_the_real_mutual_test(bounds: ModuleType) -> None:
    d = bounds.Design()
    assert bounds.ideal_rows(scenario(bounds, "plain"), 16, d, reps=1) == 1.0
    weak = bounds.ideal_rows(scenario(bounds, "jitter n=200 s=0.05 b=0.3"), 16, d, reps=1)
    assert weak < 0.75
