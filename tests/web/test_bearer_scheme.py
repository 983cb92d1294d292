"""The Bearer scheme name is case-insensitive (#12 item 7, RFC 6750 §2.1)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from netcheck.lab.testing import running_coordinator, small_profile

PROFILE = small_profile()


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer", "bEaReR"])
async def test_bearer_scheme_is_case_insensitive(tmp_path: Path, scheme: str) -> None:
    """The admin API and the dashboard accept the Bearer scheme in any case (RFC 6750)."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        headers = {"Authorization": f"{scheme} {rc.coord.config.admin_token}"}
        base = f"http://127.0.0.1:{rc.port}"
        async with aiohttp.ClientSession(headers=headers) as http:
            for path in ("/admin/status", "/dashboard/nodes"):
                async with http.get(base + path, allow_redirects=False) as resp:
                    assert resp.status == 200, (path, resp.status)
