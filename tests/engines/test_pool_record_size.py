"""`netcheck engine pool` reads at most MAX_RECORD_BYTES of a record: a huge or endless
file (a device, a pipe) is a clear error naming it, not a read that fills memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import netcheck.engines.commands as commands
from netcheck.cli import main


def test_a_record_over_the_size_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "MAX_RECORD_BYTES", 1000)
    big, small = tmp_path / "big.json", tmp_path / "small.json"
    big.write_text('{"pad": "' + "x" * 2000 + '"}')
    small.write_text("{}")
    result = CliRunner().invoke(main, ["engine", "pool", str(big), str(small)])
    assert result.exit_code == 2, result.output
    assert f"{big}: not a readable JSON calibration record: larger than 1000 bytes" in result.output


def test_an_endless_record_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """/dev/zero never ends: before, read_text() read until memory ran out."""
    monkeypatch.setattr(commands, "MAX_RECORD_BYTES", 1 << 20)
    result = CliRunner().invoke(main, ["engine", "pool", "/dev/zero", "/dev/zero"])
    assert result.exit_code == 2, result.output
    assert "/dev/zero: not a readable JSON calibration record: larger than" in result.output
