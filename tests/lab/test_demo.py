"""netcheck.lab.demo: the work folder is reused only when the demo made it."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_serve_hints_name_the_demo_config_and_what_screening_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``demo --serve`` prints commands that run as shown against the demo's coordinator:
    its config (relative when below the current folder, else whole and shell-quoted),
    enough canaries for the screening run, and --override-capacity on cpu-tiny, whose
    capacity is unmeasured (screen run is refused without it)."""
    from netcheck.config import load_profile
    from netcheck.lab.demo import SCREEN_ROUNDS, serve_hints

    monkeypatch.chdir(tmp_path)
    profile = load_profile("cpu-tiny")
    lines = serve_hints(tmp_path / "demo-run" / "coordinator.toml", profile, nodes=7)
    text = "\n".join(lines)
    commands = [line.split("#")[0].strip() for line in lines[1:]]
    assert all(c.startswith("netcheck ") for c in commands)
    assert all("--config demo-run/coordinator.toml" in c for c in commands)
    count = 2 * SCREEN_ROUNDS * 7 * profile.canaries_max
    assert f"netcheck reference build --profile cpu-tiny --count {count} --config" in text
    assert (
        f"netcheck screen run --config demo-run/coordinator.toml --rounds {SCREEN_ROUNDS} " in text
    )
    assert '--override-capacity "demo: emulated GPUs"' in text
    elsewhere = serve_hints(Path("/other/my demo/coordinator.toml"), profile, nodes=7)
    assert "  netcheck nodes --config '/other/my demo/coordinator.toml'" in elsewhere


def test_serve_hints_call_netcheck_the_way_the_demo_was_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README runs ``.venv/bin/netcheck demo``: the hints must say
    ``.venv/bin/netcheck ...`` too (a bare ``netcheck`` is "command not found" without
    an activated venv); on PATH or ``python -m netcheck`` they say ``netcheck``."""
    from netcheck.config import load_profile
    from netcheck.lab.demo import invoked_as, serve_hints

    monkeypatch.chdir(tmp_path)
    assert invoked_as(".venv/bin/netcheck") == ".venv/bin/netcheck"
    assert invoked_as(str(tmp_path / ".venv/bin/netcheck")) == ".venv/bin/netcheck"
    assert invoked_as("/opt/my env/bin/netcheck") == "'/opt/my env/bin/netcheck'"
    assert invoked_as("netcheck") == "netcheck"
    assert invoked_as("/x/netcheck/__main__.py") == "netcheck"
    lines = serve_hints(tmp_path / "demo-run" / "coordinator.toml", load_profile("cpu-tiny"), 7,
                        program=".venv/bin/netcheck")  # fmt: skip
    assert all(line.startswith("  .venv/bin/netcheck ") for line in lines[1:])
    assert "then: .venv/bin/netcheck flags show" in lines[-1]
