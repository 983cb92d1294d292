"""Dashboard and admin API list rounds in store order, not wall-clock order (#12 item 5)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from web_support import web_coordinator

from netcheck.config import load_profile
from netcheck.records import RoundPlan

T0 = 1_800_000_000.0


async def test_rounds_after_clock_step_back_are_listed_first(tmp_path: Path) -> None:
    """A round stored after the clock stepped back one hour heads /admin/rounds and the
    dashboard's rounds page."""
    profile = load_profile("cpu-tiny")
    async with web_coordinator(tmp_path, [profile]) as rc:
        store = rc.coord.store
        store.record_plan(RoundPlan("round-before-step", profile.name, 2, 2, (), ()), T0)
        store.record_plan(RoundPlan("round-after-step", profile.name, 2, 2, (), ()), T0 - 3600)
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        base = f"http://127.0.0.1:{rc.port}"
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(base + "/admin/rounds") as resp:
                assert resp.status == 200
                ids = [r["round_id"] for r in (await resp.json())["rounds"]]
            async with http.get(base + "/dashboard/rounds") as resp:
                assert resp.status == 200
                page = await resp.text()
    assert ids == ["round-after-step", "round-before-step"]
    assert page.index("round-after-step") < page.index("round-before-step")
