"""netcheck.lab.demo: the work folder is reused only when the demo made it."""

from __future__ import annotations

from pathlib import Path

from netcheck.lab.demo import DEMO_MARKER, prepare_workdir, run_demo


def test_foreign_non_empty_folder_is_kept(tmp_path: Path) -> None:
    (tmp_path / "important.txt").write_text("precious")
    assert "not made by `netcheck demo`" in (prepare_workdir(tmp_path) or "")
    assert (tmp_path / "important.txt").read_text() == "precious"
    assert run_demo(tmp_path, rounds=1, profile_name="cpu-tiny") == 2  # refused, nothing run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["important.txt"]


def test_file_instead_of_folder_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("x")
    assert "not a folder" in (prepare_workdir(target) or "")
    assert target.read_text() == "x"


def test_new_empty_and_own_folders_are_prepared(tmp_path: Path) -> None:
    new = tmp_path / "new"
    assert prepare_workdir(new) is None and (new / DEMO_MARKER).is_file()
    (new / "logs").mkdir()
    (new / "logs" / "old.log").write_text("last run")
    assert prepare_workdir(new) is None  # made by an earlier demo: emptied
    assert sorted(p.name for p in new.iterdir()) == [DEMO_MARKER]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert prepare_workdir(empty) is None
