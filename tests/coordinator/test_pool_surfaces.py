"""The canary pool on every operator surface, and a round that checked nobody failing loudly.

A real coordinator on loopback, a node client with the real handshake (its worker makes
up tokens, so checked rounds end ``wrong-answer``), SQLite, and the ``netcheck`` CLI
talking to the admin API over HTTP.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from click.testing import CliRunner, Result

from netcheck.cli import main
from netcheck.coordinator.rounds import run_round
from netcheck.engines.fingerprint import fingerprint_id
from netcheck.exitcodes import Exit
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import (
    RunningCoordinator,
    canary_store,
    running_coordinator,
    small_profile,
)

PROFILE = small_profile("pool", dispatch_timeout_s=2.0, result_timeout_s=3.0)
NODE_FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "11" * 32}


def write_config(tmp_path: Path, rc: RunningCoordinator) -> Path:
    """A coordinator config addressing the running coordinator's admin API."""
    cfg = tmp_path / "coordinator.toml"
    cfg.write_text(
        f'port = {rc.port}\nidentity_key = "k.pem"\n'
        f'admin_token = "{rc.coord.config.admin_token}"\nprofiles = ["{PROFILE.name}"]\n'
        f'database = "{rc.coord.config.database}"\nopen_enrollment = true\n'
    )
    return cfg


async def cli(*args: str) -> Result:
    """Run the netcheck CLI in a thread (it runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args), terminal_width=200)


async def get(rc: RunningCoordinator, path: str) -> Any:
    headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.get(f"http://127.0.0.1:{rc.port}{path}") as resp,
    ):
        assert resp.status == 200, await resp.text()
        return await resp.json() if resp.content_type == "application/json" else await resp.text()


async def test_pool_is_shown_and_an_empty_pool_fails_the_round_command(tmp_path: Path) -> None:
    """Admin API, /metrics and the CLI show the pool shrink; a round with nothing checked
    exits 8 naming the build command, and round list honours --limit."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, NODE_FP, 2, answer=range(4))
    fp = fingerprint_id(dict(NODE_FP))
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.start(rc.node(MadeUpWorker(NODE_FP, PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1)
        cfg = write_config(tmp_path, rc)

        (entry,) = (await get(rc, "/admin/references"))["references"]
        assert (entry["fingerprint_id"], entry["unspent"], entry["nodes"]) == (fp, 2, 1)
        assert (entry["rounds_left"], entry["state"]) == (2, "low")
        assert (await get(rc, "/admin/status"))["references"] == [entry]
        metrics = await get(rc, "/metrics")
        assert f'netcheck_reference_unspent{{fingerprint="{fp}",profile="pool"}} 2.0' in metrics
        assert f'netcheck_reference_rounds_left{{fingerprint="{fp}",profile="pool"}} 2.0' in metrics

        for _ in range(2):  # checked rounds (made-up tokens fail, but they are checked)
            report = await run_round(rc.coord, PROFILE.name)
            assert [str(o.verdict) for o in report.outcomes] == ["wrong-answer"]
        (entry,) = (await get(rc, "/admin/references"))["references"]
        assert (entry["unspent"], entry["rounds_left"], entry["state"]) == (0, 0, "empty")

        result = await cli("round", "run", "--config", str(cfg))
        assert result.exit_code == Exit.NOTHING_CHECKED, result.output
        assert "unchecked" in result.output and "nothing was checked" in result.output
        assert f"netcheck reference build --profile pool --config {cfg}" in result.output

        status = await cli("references", "status", "--config", str(cfg))
        assert status.exit_code == 0, status.output
        assert "empty" in status.output
        # the command runs as printed: this config, not a <coordinator.toml> redirection
        assert f"netcheck reference build --profile pool --config {cfg}" in status.output

        listed = await cli("round", "list", "--config", str(cfg), "--limit", "2", "--json")
        data = json.loads(listed.output)
        assert (len(data["rounds"]), data["total"]) == (2, 3)
        shown = await cli("round", "show", "--config", str(cfg), data["rounds"][0]["round_id"])
        assert shown.exit_code == 0 and "unchecked" in shown.output
        missing = await cli("round", "show", "--config", str(cfg), "r-none")
        assert missing.exit_code == Exit.NOT_FOUND, missing.output
        assert f"netcheck round list --config {cfg}" in missing.output  # where ids come from
        no_id = await cli("round", "show", "--config", str(cfg))
        assert no_id.exit_code == Exit.USAGE and "netcheck round list" in no_id.output


async def test_round_with_a_checked_node_exits_zero(tmp_path: Path) -> None:
    """A round that checked its node exits 0, or 9 when --fail-on-failing sees a failure."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, NODE_FP, 4, answer=range(4))
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.start(rc.node(MadeUpWorker(NODE_FP, PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1)
        cfg = write_config(tmp_path, rc)
        ok = await cli("round", "run", "--config", str(cfg))
        assert ok.exit_code == 0, ok.output
        assert "checked 1 of 1 node(s), 0 passed" in ok.output
        strict = await cli("round", "run", "--config", str(cfg), "--fail-on-failing")
        assert strict.exit_code == Exit.NODES_FAILED, strict.output
