"""The admin API and the operator CLI when the coordinator's database fails under it
(PostgreSQL stopped, SQLite disk full or locked past the retry budget): a 503 naming the
database failure and exit 10 (``STORAGE``), the coordinator kept up. Before: every read
was a 500 "Server got itself in trouble" with a traceback in the coordinator's log (CLI
exit 2), and ``round run`` a 409 (exit 6, "refused as things stand")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError
from test_pool_surfaces import NODE_FP, PROFILE, cli, write_config

from netcheck.exitcodes import Exit
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import canary_store, running_coordinator


async def test_database_down_is_a_503_and_exit_10_not_a_500(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = canary_store(tmp_path / "netcheck.db", PROFILE, NODE_FP, 8, answer=range(4))
    async with running_coordinator(tmp_path, [PROFILE], store=store, storage_retry_s=0.2) as rc:
        rc.start(rc.node(MadeUpWorker(NODE_FP, PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1)
        cfg = str(write_config(tmp_path, rc))
        assert (await cli("round", "list", "--config", cfg)).exit_code == 0

        def refused(*args: object, **kwargs: object) -> object:
            raise OperationalError("connect", {}, ConnectionRefusedError("connection refused"))

        monkeypatch.setattr(store._engine, "connect", refused)  # the server went away
        for args in (["round", "list"], ["round", "show", "r-x"], ["nodes"], ["flags", "list"],
                     ["reference", "status"], ["round", "run"]):  # fmt: skip
            res = await cli(*args, "--config", cfg)
            assert res.exit_code == Exit.STORAGE, (args, res.output)
            said = " ".join(res.output.split())
            assert "HTTP 503: database unavailable:" in said, (args, said)
            assert "connection refused" in said and "Server got itself" not in said
        assert "Error handling request" not in caplog.text  # no traceback logged
        assert rc.coord.sessions  # the node's session is untouched
        monkeypatch.undo()  # the database is back: so is the API
        assert (await cli("round", "run", "--config", cfg)).exit_code == 0


async def test_screening_job_failed_by_the_database_exits_10(tmp_path: Path) -> None:
    """A screening job whose rounds fail on the database ends ``failed`` with
    ``error_kind`` "storage"; ``screen run`` exits 10 with its error (before: 6)."""
    from click.testing import CliRunner

    from netcheck.cli import main
    from netcheck.coordinator import commands
    from netcheck.coordinator.jobs import ScreeningJobs
    from netcheck.errors import StorageUnavailable

    async def runner(*args: object) -> dict[str, object]:
        raise StorageUnavailable("record plan r1: disk full (database or disk is full)")

    jobs = ScreeningJobs(runner)  # type: ignore[arg-type]
    job = jobs.start("p", 4)
    assert job.task is not None
    await job.task
    failed = job.as_dict()
    assert (failed["state"], failed["error_kind"]) == ("failed", "storage")
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    mp = pytest.MonkeyPatch()
    mp.setattr(commands, "run_job", lambda *a: failed)
    try:
        res = await asyncio.to_thread(CliRunner().invoke, main, ["screen", "run", "--config",
                                                                 str(cfg)])  # fmt: skip
    finally:
        mp.undo()
    assert res.exit_code == Exit.STORAGE, res.output
    assert "screening run failed: record plan r1: disk full" in res.output
