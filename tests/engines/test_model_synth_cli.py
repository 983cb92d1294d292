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
