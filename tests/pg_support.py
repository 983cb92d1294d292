"""A private PostgreSQL cluster for the fault tests that stop, start or restart the
server (tests/faults/test_spooled_postgres.py, tests/gateway/test_gateway_spool.py,
tests/gateway/test_postgres_restart.py): the ``private_pg`` fixture of tests/conftest.py
and :func:`pg_ctl`."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from netcheck.lab.demo import free_port

SCRIPT = str(Path(__file__).resolve().parents[1] / "scripts" / "postgres")


def private_cluster() -> Iterator[tuple[str, dict[str, str]]]:
    """(URL, env) of a private cluster started by scripts/postgres on a free port,
    stopped and deleted afterwards; skipped where PostgreSQL is not configured."""
    if not os.environ.get("NETCHECK_TEST_POSTGRES_URL"):
        pytest.skip("PostgreSQL not configured: set NETCHECK_TEST_POSTGRES_URL")
    pgdir = tempfile.mkdtemp(prefix="netcheck-pg-private-")
    env = {**os.environ, "NETCHECK_PG_DIR": pgdir, "NETCHECK_PG_PORT": str(free_port())}
    try:
        url = subprocess.run(
            [SCRIPT], env=env, check=True, capture_output=True, text=True, timeout=120
        ).stdout.strip()
        yield url, env
    finally:
        subprocess.run([SCRIPT, "stop"], env=env, check=False, timeout=120)


def pg_ctl(env: dict[str, str], action: str) -> None:
    """``pg_ctl <action>`` (stop/start/restart, fast mode) of the private cluster."""
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    pgdir = env["NETCHECK_PG_DIR"]
    opts = (f"-p {env['NETCHECK_PG_PORT']} -k {pgdir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=200")  # fmt: skip
    cmd = [str(bins[-1]), "-D", f"{pgdir}/data", "-l", f"{pgdir}/server.log", "-m", "fast",
           "-w", "-o", opts, action]  # fmt: skip
    if os.getuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    # The server inherits pg_ctl's stdout: no pipe, or run() would wait for the server.
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120)  # fmt: skip
