"""The coordinator's ``slowness_floor``, ``slowness_alpha`` and ``slowness_min_rounds``
(netcheck.analysis.slowness.SlownessConfig): defaults are the library's, a bad value is a
ConfigError naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_support import load_coordinator

from netcheck.analysis.slowness import SlownessConfig
from netcheck.errors import ConfigError


def test_defaults_are_the_library_defaults_and_values_load(tmp_path: Path) -> None:
    """Unset, the three fields are SlownessConfig's defaults; set, they load as written."""
    cfg = load_coordinator(tmp_path, "")
    lib = SlownessConfig()
    assert (cfg.slowness_floor, cfg.slowness_alpha, cfg.slowness_min_rounds) == (
        lib.floor, lib.alpha, lib.min_rounds)  # fmt: skip
    cfg = load_coordinator(
        tmp_path, "slowness_floor = 1.4\nslowness_alpha = 0.05\nslowness_min_rounds = 12"
    )
    assert (cfg.slowness_floor, cfg.slowness_alpha, cfg.slowness_min_rounds) == (1.4, 0.05, 12)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("slowness_floor = 1.0", "c.toml: slowness_floor: Input should be greater than 1"),
        ("slowness_floor = 0.9", "c.toml: slowness_floor: Input should be greater than 1"),
        ("slowness_floor = 'high'", "c.toml: slowness_floor: Input should be a valid number"),
        ("slowness_alpha = 0", "c.toml: slowness_alpha: Input should be greater than 0"),
        ("slowness_alpha = 1.0", "c.toml: slowness_alpha: Input should be less than 1"),
        ("slowness_min_rounds = 0",
         "c.toml: slowness_min_rounds: Input should be greater than or equal to 1"),
        ("slowness_min_rounds = 2.5", "c.toml: slowness_min_rounds: Input should be a valid int"),
        ("slowness_flor = 1.3", "slowness_flor: unknown field; did you mean 'slowness_floor'"),
    ],
)  # fmt: skip
def test_bad_values_name_the_file_and_the_field(tmp_path: Path, lines: str, message: str) -> None:
    """Each bad value is a ConfigError naming ``c.toml`` and the field."""
    with pytest.raises(ConfigError) as err:
        load_coordinator(tmp_path, lines)
    assert message in str(err.value)


def test_min_rounds_above_the_window_is_refused(tmp_path: Path) -> None:
    """More loaded rounds than the window holds would silently test no node at all."""
    with pytest.raises(ConfigError) as err:
        load_coordinator(tmp_path, "slowness_min_rounds = 129")
    assert "slowness_min_rounds (129) must be <= screening_window_rounds (128)" in str(err.value)
    cfg = load_coordinator(tmp_path, "slowness_min_rounds = 16\nscreening_window_rounds = 16")
    assert cfg.slowness_min_rounds == 16
