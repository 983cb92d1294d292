"""`netcheck model synth` into a folder it cannot create: an error naming the folder,
exit 2 (was a FileNotFoundError / NotADirectoryError traceback)."""

from __future__ import annotations

from pathlib import Path

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
