"""Each node's timing budget (release order and write, arrival-to-processing delay) is in
the round report, the round page and the timings export (docs/dashboard.md)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from web_support import web_coordinator

from netcheck.coordinator.rounds import run_round
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import canary_store, small_profile

PROFILE = small_profile(result_timeout_s=5.0)
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}


async def test_round_page_and_export_show_the_timing_budget(tmp_path: Path) -> None:
    """Three nodes, one round: the report gives each its release index (a permutation of
    0..2), release offset, processing delay (>= 0) and arrival stamp source; the round
    page has the columns; the timings export carries the same budget in ``extra``."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 30, answer=(1, 2, 3, 4))
    async with web_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.start_named({f"n{i}": MadeUpWorker(FP, 4) for i in range(3)}, PROFILE.name)
        await rc.wait_connected(3)
        report = (await run_round(rc.coord, PROFILE.name)).as_dict()
        timings = [v["timing"] for v in report["verdicts"]]
        assert sorted(t["release_index"] for t in timings) == [0, 1, 2]
        assert all(t["release_offset_s"] >= 0 and t["processing_delay_s"] >= 0 for t in timings)
        assert all(t["arrived_ns"] <= t["processed_ns"] for t in timings)
        assert all(t["arrival_stamp"] in ("kernel", "read") for t in timings)
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        base = f"http://127.0.0.1:{rc.port}"
        rid = report["round_id"]
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(f"{base}/dashboard/rounds/{rid}") as resp:
                html = await resp.text()
            assert resp.status == 200
            assert "release #" in html and "arrival → processed" in html
            async with http.get(f"{base}/export/timings.json?round_id={rid}") as resp:
                doc = await resp.json()
        budgets = {r["node_key"]: r["extra"]["budget"] for r in doc["rows"]}
        assert budgets == {v["node_key"]: _budget(v["timing"]) for v in report["verdicts"]}


def _budget(t: dict[str, object]) -> dict[str, object]:
    keys = (
        "release_index",
        "release_offset_s",
        "release_write_s",
        "processing_delay_s",
        "arrival_stamp",
    )
    return {k: t[k] for k in keys}
