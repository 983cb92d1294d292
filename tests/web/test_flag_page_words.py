"""The flag page speaks plainly: the rule in words with its numbers, screening edges
under plain column names, no config names or detector letters."""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import aiohttp
from web_support import web_coordinator

from netcheck.config import load_profile
from netcheck.storage.flags import FlagStore

EDGE = {"a": "ed25519:" + "A" * 43, "b": "ed25519:" + "B" * 43, "detector": "A",
        "statistic": 6.1, "df": 12.0, "p_value": 1e-6, "p_threshold": 1e-4, "effect": 0.4,
        "effect_floor": math.log(1.25), "n_rounds": 9}  # fmt: skip


async def test_shared_backend_flag_page_has_no_jargon(tmp_path: Path) -> None:
    """An old-style stored rule ("H0: effect <= effect_floor") is shown in plain words."""
    profile = load_profile("cpu-tiny")
    async with web_coordinator(tmp_path, [profile]) as rc:
        fid = FlagStore(rc.coord.store).add_flag(
            "shared-backend", "confirmed", profile.name, [EDGE["a"], EDGE["b"]], 2e-5, 5e-4,
            {"rule": "group phase: ... H0: effect <= effect_floor at p_threshold ...",
             "screening": {"rounds": [], "edges": [EDGE]},
             "confirmation": {"rounds": [], "effect_floor": math.log(1.25)}},
        )  # fmt: skip
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        url = f"http://127.0.0.1:{rc.port}/dashboard/flags/{fid}"
        async with aiohttp.ClientSession(headers=headers) as http, http.get(url) as resp:
            assert resp.status == 200
            page = await resp.text()
    # what a reader sees (tags stripped); the raw stored row at the end stays raw on purpose
    visible = re.sub(r"<[^>]+>", " ", page.split("<h2>Stored row</h2>")[0])
    for word in ("effect_floor", "p_threshold", "H0", "Detector A", "detector edges"):
        assert word not in visible, word
    assert "more than 25% above its time alone" in visible
    assert "flagged when the statistic is below the threshold" in visible
    assert "p-value must be below" in visible and "slower when the partner is loaded" in visible


async def test_flag_page_review_command_names_config_and_reviewer(tmp_path: Path) -> None:
    """The review command the flag page gives carries --config and --by (a service
    shell has no $USER to default --by to)."""
    profile = load_profile("cpu-tiny")
    async with web_coordinator(tmp_path, [profile]) as rc:
        fid = FlagStore(rc.coord.store).add_flag(
            "capacity", "confirmed", profile.name, [EDGE["a"]], 3.0, 3.0, {}
        )
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        url = f"http://127.0.0.1:{rc.port}/dashboard/flags/{fid}"
        async with aiohttp.ClientSession(headers=headers) as http, http.get(url) as resp:
            assert resp.status == 200
            page = html.unescape(re.sub(r"<[^>]+>", " ", await resp.text()))
    assert (
        "netcheck flags ack|resolve|false-positive|reopen --config <coordinator.toml> "
        f"{fid} --by NAME --note"
    ) in " ".join(page.split())
