"""The shell scripts under scripts/ answer --help and refuse unknown arguments before
doing anything (scripts/postgres started a server on any argument it did not know)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_postgres_script_help_and_unknown_argument_start_nothing(tmp_path: Path) -> None:
    """``scripts/postgres --help`` prints its usage (exit 0) and ``scripts/postgres bogus``
    exits 2: neither creates the data folder, so no server was started."""
    env = {"PATH": "/usr/bin:/bin", "NETCHECK_PG_DIR": str(tmp_path / "pg"),
           "NETCHECK_PG_PORT": "54999"}  # fmt: skip
    for arg, code in (("--help", 0), ("bogus", 2)):
        run = subprocess.run(
            ["bash", str(ROOT / "scripts" / "postgres"), arg],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert run.returncode == code, run.stderr
        assert "usage: scripts/postgres [start|stop|url]" in run.stdout + run.stderr
        assert not (tmp_path / "pg").exists()


def test_setup_refuses_an_old_python_before_making_anything(tmp_path: Path) -> None:
    """``scripts/setup`` with a Python older than 3.11, or beside a ``.venv`` made by one,
    exits 1 naming the fix (``PYTHON=...``, ``rm -rf .venv``) and installs nothing: a
    ``.venv`` is reused as it is, so a wrong one would stay wrong. Run from a copy, so a
    missing check fails on the fake interpreter, never in this checkout's ``.venv``."""
    (tmp_path / "scripts").mkdir()
    setup = tmp_path / "scripts" / "setup"
    setup.write_text((ROOT / "scripts" / "setup").read_text())
    old = tmp_path / "python3.10"
    old.write_text('#!/bin/sh\n[ "$1" = -V ] && echo "Python 3.10.12"\nexit 1\n')
    old.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(old), "NETCHECK_SKIP_CHROMIUM": "1"}
    run = subprocess.run(["bash", str(setup)], env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    assert "needs Python 3.11 or newer" in run.stderr and "Python 3.10.12" in run.stderr
    assert "PYTHON=python3.11 scripts/setup" in run.stderr
    assert not (tmp_path / ".venv").exists()
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(old)
    env["PYTHON"] = "python3"  # 3.11+ here
    run = subprocess.run(["bash", str(setup)], env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    assert ".venv was made with Python 3.10.12" in run.stderr and "rm -rf .venv" in run.stderr
