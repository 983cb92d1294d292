"""`engine calibrate` checks where its results go before it measures: an --out that
cannot be created or written (and, with --update-profile, the profile's folder) is an
error at once. Before: the whole measurement ran (17.8 s for a minimal cpu-tiny run,
minutes on a GPU) and was lost to a NotADirectoryError traceback at the end."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from test_calibrate import _result

from netcheck.cli import main
from netcheck.engines import calibrate


def test_an_unwritable_out_folder_is_refused_before_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def measure(profile: object, **kw: object) -> dict[str, object]:
        raise AssertionError("measured although the results could not be written")

    monkeypatch.setattr(calibrate, "run_calibration", measure)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "out"
    result = CliRunner().invoke(
        main, ["engine", "calibrate", "--profile", "cpu-tiny", "--out", str(out)]
    )
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"error: {out}: not a writable folder" in result.output


def test_results_are_written_to_a_new_out_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibrate, "run_calibration", lambda profile, **kw: _result())
    out = tmp_path / "new" / "folder"
    result = CliRunner().invoke(
        main, ["engine", "calibrate", "--profile", "cpu-tiny", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "cpu-tiny.json", "cpu-tiny.md", "cpu-tiny.tables.toml",
    ]  # fmt: skip
