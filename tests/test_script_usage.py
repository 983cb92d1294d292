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
