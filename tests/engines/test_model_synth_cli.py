"""`netcheck model synth` into a folder it cannot create: an error naming the folder,
exit 2 (was a FileNotFoundError / NotADirectoryError traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from netcheck.cli import main


def test_an_output_folder_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = blocker / "model"
    result = CliRunner().invoke(main, ["model", "synth", "--preset", "tiny", str(out)])
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"error: {out}: cannot write the model" in result.output


def test_demo_rounds_and_backend_port_are_range_checked() -> None:
    """`demo --rounds -1` ran no round and said "demo OK" (51 s of setup); `node backend
    --port 99999` was an OverflowError traceback from bind(). Both are usage errors now."""
    for args in (["demo", "--rounds", "0"], ["demo", "--rounds", "-1"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and "--rounds" in result.output, result.output
    args = ["node", "backend", "--profile", "cpu-tiny", "--port", "99999"]
    result = CliRunner().invoke(main, [*args, "--emulate-batch-time", "1"])
    assert result.exit_code == 2 and "--port" in result.output, result.output


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_emulate_batch_time_must_be_finite_seconds(tmp_path: Path, value: str) -> None:
    """`node run --emulate-batch-time -1` was a ValueError traceback from the emulation
    (after the coordinator probe); nan and inf were taken. Now a usage error at once."""
    cfg = tmp_path / "node.toml"
    cfg.write_text("")  # never read: the option is refused first
    for args in (
        ["node", "run", "--config", str(cfg)],
        ["node", "backend", "--profile", "cpu-tiny", "--port", "0"],
    ):
        result = CliRunner().invoke(main, [*args, "--emulate-batch-time", value])
        assert result.exit_code == 2, (args, result.output, result.exception)
        assert "--emulate-batch-time" in result.output and "seconds >= 0" in result.output
