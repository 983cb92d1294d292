"""A flag's receipts.json gives ``flag_id`` as an int, like the admin API and exports."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from web_support import web_coordinator

from netcheck.config import load_profile
from netcheck.storage.flags import FlagStore

KEY = "ed25519:" + "A" * 43


async def test_receipts_json_flag_id_is_an_int(tmp_path: Path) -> None:
    """receipts.json and ``GET /admin/flags/{id}`` give the same int (was the string "N")."""
    profile = load_profile("cpu-tiny")
    async with web_coordinator(tmp_path, [profile]) as rc:
        fid = FlagStore(rc.coord.store).add_flag(
            "capacity", "confirmed", profile.name, [KEY], 3.0, 3.0, {}
        )
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        base = f"http://127.0.0.1:{rc.port}"
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(f"{base}/dashboard/flags/{fid}/receipts.json") as resp:
                assert resp.status == 200
                data = await resp.json()
            async with http.get(f"{base}/admin/flags/{fid}") as resp:
                assert resp.status == 200
                admin = await resp.json()

    assert data["flag_id"] == fid and isinstance(data["flag_id"], int)
    assert data["members"] == [KEY]
    assert type(admin["flag_id"]) is type(data["flag_id"])  # the same JSON type
