"""netcheck.web.unavailable: the dashboard, exports and ``/metrics`` over a database
that fails under the running coordinator (PostgreSQL stopped): a 503 naming the
failure, one WARNING line, and only behind the access check. Before: a 500 "Server got
itself in trouble" and a traceback per request (a Prometheus scrape every 15 s)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from sqlalchemy.exc import OperationalError

from netcheck.lab.testing import running_coordinator, small_profile

PROFILE = small_profile("web503")


async def test_database_down_is_a_503_behind_the_access_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        auth = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}

        def refused(*args: object, **kwargs: object) -> object:
            raise OperationalError("connect", {}, ConnectionRefusedError("connection refused"))

        monkeypatch.setattr(rc.coord.store._engine, "connect", refused)
        async with aiohttp.ClientSession() as http:
            for path in ("/dashboard/rounds", "/dashboard/flags", "/metrics",
                         "/export/rounds.csv", "/admin/rounds"):  # fmt: skip
                async with http.get(base + path, headers=auth, allow_redirects=False) as r:
                    text = await r.text()
                    assert r.status == 503, (path, r.status, text)
                    assert text.startswith("database unavailable: ") and "refused" in text
                async with http.get(base + path, allow_redirects=False) as r:  # no token
                    assert r.status in (302, 401), (path, r.status)
                    assert "refused" not in await r.text()
        assert "Error handling request" not in caplog.text
