"""The coordinator's ``confirm_budget_rounds`` (netcheck.analysis.confirm_budget): 0 =
no bound, else at least a pair's first look; a bad value is a ConfigError naming the
field."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_support import load_coordinator

from netcheck.errors import ConfigError
from netcheck.lab.sim.live import LiveConfig


def test_budget_default_and_accepted_values(tmp_path: Path) -> None:
    """The default is the simulator's; 0 (no bound) and a pair's first look load."""
    cfg = load_coordinator(tmp_path, "")
    assert cfg.confirm_budget_rounds == LiveConfig().confirm_budget_rounds
    assert load_coordinator(tmp_path, "confirm_budget_rounds = 0").confirm_budget_rounds == 0
    cfg = load_coordinator(tmp_path, "confirm_cycles = 4\nconfirm_budget_rounds = 12")
    assert cfg.confirm_budget_rounds == 12


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("confirm_budget_rounds = 23",
         "confirm_budget_rounds (23) must be 0 (no bound) or at least 24 (3 * confirm_cycles"),
        ("confirm_cycles = 4\nconfirm_budget_rounds = 11", "confirm_budget_rounds (11) must be 0"),
        ("confirm_budget_rounds = -1", "confirm_budget_rounds: Input should be greater than"),
        ("confirm_budget_rounds = 1e9", "confirm_budget_rounds: Input should be"),
    ],
)  # fmt: skip
def test_budget_rejects(tmp_path: Path, lines: str, message: str) -> None:
    """Each bad value is a ConfigError naming the field (and, below a first look, the bound)."""
    with pytest.raises(ConfigError) as err:
        load_coordinator(tmp_path, lines)
    assert message in str(err.value)
