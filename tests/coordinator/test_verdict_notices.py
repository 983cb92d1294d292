"""Nodes learn their verdicts: a signed notice after each round, logged on the node and
shown by ``netcheck node status``; a fingerprint mismatch names the differing field."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner

from netcheck.cli import main
from netcheck.coordinator.rounds import run_round
from netcheck.engines.fingerprint import fingerprint_id
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import canary_store, running_coordinator, small_profile
from netcheck.node.verdicts import default_log_path

PROFILE = small_profile("notice", dispatch_timeout_s=2.0, result_timeout_s=3.0)
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "44" * 32, "cpu_threads": 1}


async def wait_for(cond: object, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not cond():  # type: ignore[operator]
            await asyncio.sleep(0.02)


async def test_node_gets_logs_and_shows_its_signed_verdict(tmp_path: Path) -> None:
    """The node receives a verified notice per round; node status shows them, signed."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 8, answer=range(4))
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        node_cfg = tmp_path / "node.toml"
        node_cfg.write_text(
            f'coordinator_url = "{rc.url}"\n'
            f'coordinator_key = "{public_key_text(rc.identity)}"\n'
            'identity_key = "node.pem"\nprofile = "notice"\n'
        )
        client = rc.node(MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name)
        client.verdict_log = default_log_path(node_cfg)
        rc.start(client)
        await rc.wait_connected(1)
        report = await run_round(rc.coord, PROFILE.name)
        (outcome,) = report.outcomes
        await wait_for(lambda: len(client.verdicts) == 1)
    (notice,) = client.verdicts
    assert (notice.round_id, notice.verdict) == (report.round_id, "wrong-answer")
    assert notice.elapsed_s == outcome.elapsed_s and notice.deadline_s is not None
    assert "canar" not in notice.reason and notice.reason != outcome.reason
    result = await asyncio.to_thread(
        CliRunner().invoke, main, ["node", "status", "--config", str(node_cfg), "--json"]
    )
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.output)["verdicts"]
    assert entry["round_id"] == report.round_id and entry["signature_ok"] is True
    table = await asyncio.to_thread(
        CliRunner().invoke, main, ["node", "status", "--config", str(node_cfg)],
        terminal_width=200,
    )  # fmt: skip
    assert "wrong-answer" in table.output and "ok" in table.output


async def test_fingerprint_mismatch_names_the_field(tmp_path: Path) -> None:
    """A node with cpu_threads = 2 against references built with 1 is told that field."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 8, answer=range(4))
    store.add_reference_set(PROFILE.name, fingerprint_id(dict(FP)), FP)
    other = {**FP, "cpu_threads": 2}
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        client = rc.node(MadeUpWorker(other, PROFILE.max_new_tokens), PROFILE.name)
        rc.start(client)
        await rc.wait_connected(1)
        report = await run_round(rc.coord, PROFILE.name)
        await wait_for(lambda: len(client.verdicts) == 1)
    (outcome,) = report.outcomes
    assert str(outcome.verdict) == "profile-mismatch"
    assert "cpu_threads: node 2, references 1" in outcome.reason
    assert client.verdicts[0].verdict == "profile-mismatch"
    assert client.verdicts[0].reason.endswith("cpu_threads: node 2, references 1")
