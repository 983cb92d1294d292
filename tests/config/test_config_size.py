"""Config and profile files are read with a size bound (MAX_TOML_BYTES): a huge or
endless file (``--config /dev/zero``, a stalled pipe) is a ConfigError naming it, not a
read until memory runs out."""

from __future__ import annotations

from pathlib import Path

import pytest

import netcheck.config.base as base
from netcheck.config import load_node_config
from netcheck.errors import ConfigError


def test_a_config_over_the_bound_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "MAX_TOML_BYTES", 1000, raising=False)
    path = tmp_path / "node.toml"
    path.write_text("# padding\n" * 200 + 'profile = "cpu-tiny"\n')
    with pytest.raises(ConfigError, match=f"{path}: larger than 1000 bytes"):
        load_node_config(path)


def test_an_endless_config_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "MAX_TOML_BYTES", 1 << 20, raising=False)
    with pytest.raises(ConfigError, match="/dev/zero: larger than"):
        load_node_config("/dev/zero")
