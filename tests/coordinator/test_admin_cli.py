"""The operator CLI against a live coordinator: known nodes stay listed after they leave
with their real last-seen time, and a bad flag filter is an error, not an empty table."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from test_pool_surfaces import NODE_FP, PROFILE, cli, write_config

from netcheck.exitcodes import Exit
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import running_coordinator


async def test_disconnected_node_stays_listed_with_last_seen(tmp_path: Path) -> None:
    """After a node leaves, `netcheck nodes` still lists it, last seen when it left."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        task = rc.start(rc.node(MadeUpWorker(NODE_FP, PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1)
        cfg = write_config(tmp_path, rc)
        joined = json.loads((await cli("nodes", "--config", str(cfg), "--json")).output)
        (row,) = joined["known"]
        assert row["connected"] is True
        await asyncio.sleep(1.0)
        task.cancel()
        async with asyncio.timeout(10):
            while rc.coord.sessions:
                await asyncio.sleep(0.02)
        left_at = time.time()
        await asyncio.sleep(0.2)  # the coordinator stores the time after closing
        data = json.loads((await cli("nodes", "--config", str(cfg), "--json")).output)
        (row,) = data["known"]
        assert data["connected"] == [] and row["connected"] is False
        assert row["last_seen_at"] >= row["first_seen_at"] + 0.9  # not the join time
        assert row["last_seen_at"] <= left_at + 0.01
        table = await cli("nodes", "--config", str(cfg))
        assert "1 known node(s), 0 connected" in table.output
        assert f"no node connected to the coordinator at http://127.0.0.1:{rc.port}" in table.output
        assert row["node_key"] in table.output


async def test_unknown_flag_kind_is_an_error(tmp_path: Path) -> None:
    """`flags list --kind bogus` exits 2 naming the kinds; a known kind lists (none)."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        cfg = write_config(tmp_path, rc)
        bad = await cli("flags", "list", "--config", str(cfg), "--kind", "bogus")
        assert bad.exit_code == Exit.USAGE, bad.output
        assert "unknown kind 'bogus'" in bad.output and "shared-backend" in bad.output
        bad = await cli("flags", "list", "--config", str(cfg), "--status", "nope")
        assert bad.exit_code == Exit.USAGE and "unknown status" in bad.output
        ok = await cli("flags", "list", "--config", str(cfg), "--kind", "capacity", "--json")
        assert ok.exit_code == 0 and json.loads(ok.output)["flags"] == []
