"""Every dashboard page states the profiles that cannot tell two identities on one card
apart (issue 10; warnings computed by netcheck.coordinator.assembly)."""

from __future__ import annotations

import html as html_module
from pathlib import Path

import aiohttp
from web_support import web_coordinator

from netcheck.config import CapacityRecord, DeadlineParams
from netcheck.lab.testing import small_profile


async def test_pages_name_unsafe_profiles_only(tmp_path: Path) -> None:
    """An unmeasured profile is named on the nodes and rounds pages; a safe one is not.
    The calibrate hint names the commands as netcheck's, without a program name, as the
    capacity 409 does (it said a bare `netcheck engine calibrate` before session 15)."""
    unsafe = small_profile("unmeasured-profile")
    safe = small_profile(
        "measured-profile",
        deadline=DeadlineParams(t_ref_s=1.0, a=1.1, b=1.0, slack_s=0.0, max_rtt_s=0.0),
        capacity=CapacityRecord(t_s=[1.0, 2.0], margin=1.8, card="t", date="2026-11-30"),
    )
    async with web_coordinator(tmp_path, [unsafe, safe]) as rc:
        token = rc.coord.config.admin_token
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            for page in ("nodes", "rounds"):
                url = f"http://127.0.0.1:{rc.port}/dashboard/{page}"
                async with http.get(url) as resp:
                    html = await resp.text()
                assert resp.status == 200
                assert 'class="capacity-warning"' in html
                assert "profile unmeasured-profile: capacity not measured" in html
                assert "cannot tell two identities on one card apart" in html
                assert "profile measured-profile" not in html
                # no bare `netcheck ...` command line (the browser user's is not known)
                text = html_module.unescape(html)
                assert "netcheck's `engine calibrate --profile unmeasured-profile`" in text
                assert "`netcheck " not in text and "netcheck engine" not in text
