"""netcheck.lab.demo_report: the demo's closing overrun count says what to do."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from netcheck.lab.demo_report import report_overruns


def test_overruns_name_the_load_and_what_to_do(tmp_path: Path) -> None:
    """Overrun batches are counted per node, and the line says to rerun on an idle host
    with the load average now; no overrun prints nothing."""
    (tmp_path / "honest-1.log").write_text("x EMULATION OVERRUN y\nEMULATION OVERRUN\n")
    (tmp_path / "made-up.log").write_text("fine\n")
    console = Console(record=True, width=400)
    assert report_overruns(console, tmp_path, ["honest-1", "made-up"]) == 2
    text = " ".join(console.export_text().split())
    assert "EMULATION OVERRUN in 2 batches (honest-1 2)" in text
    assert "run the demo again on an idle host (load average now" in text
    quiet = Console(record=True, width=400)
    assert report_overruns(quiet, tmp_path, ["made-up"]) == 0
    assert quiet.export_text() == ""
