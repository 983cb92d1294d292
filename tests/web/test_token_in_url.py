"""Tokens in URLs (docs/dashboard.md, "Tokens in URLs"): `?token=` is only a one-time
login link for dashboard pages (GET, exchanged for the cookie and dropped from the URL);
everywhere else it is refused, and a refused one is never copied into another URL."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from web_support import web_coordinator

from netcheck.config import Profile, load_profile
from netcheck.web.access import COOKIE


@pytest.fixture
def profile() -> Profile:
    return load_profile("cpu-tiny")


async def test_token_in_url_refused_on_exports_and_metrics(
    tmp_path: Path, profile: Profile
) -> None:
    """The right token as ?token= on /export/ and /metrics is 401 naming the header to
    use (was 200: the token stayed in the URL of every scrape and download)."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        token = rc.coord.config.admin_token
        async with aiohttp.ClientSession() as http:
            for path in ("/export/rounds.csv", "/metrics"):
                async with http.get(f"{base}{path}?token={token}") as resp:
                    assert resp.status == 401, path
                    assert "Authorization: Bearer" in await resp.text()
                bearer = {"Authorization": f"Bearer {token}"}
                async with http.get(base + path, headers=bearer) as resp:
                    assert resp.status == 200, path


async def test_token_in_url_refused_even_beside_a_valid_header(
    tmp_path: Path, profile: Profile
) -> None:
    """?token= on /export/, /metrics and /admin/ is 401 even when the request also has a
    valid Authorization header (was 200 for /export/ and /admin/: s15-new15 finding 14),
    as docs/dashboard.md says: the token still went into a URL, so it is refused always."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        token = rc.coord.config.admin_token
        bearer = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=bearer) as http:
            for path in ("/export/flags.json", "/export/rounds.csv", "/metrics", "/admin/status"):
                async with http.get(f"{base}{path}?token={token}") as resp:
                    assert resp.status == 401, path
                    assert "not accepted in a URL" in await resp.text(), path
                async with http.get(base + path) as resp:
                    assert resp.status == 200, path


async def test_token_in_url_refused_on_dashboard_posts(tmp_path: Path, profile: Profile) -> None:
    """A POST to a dashboard path with ?token= is 401, not served (was served)."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        token = rc.coord.config.admin_token
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{base}/dashboard/flags/1/review?token={token}", data={"status": "confirmed"}
            ) as resp,
        ):
            assert resp.status == 401


async def test_wrong_token_in_url_is_not_copied_into_the_login_redirect(
    tmp_path: Path, profile: Profile
) -> None:
    """A wrong (say, last month's) token in a page URL is dropped from ``next=``; the
    right one still logs in once and is taken out of the URL."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        token = rc.coord.config.admin_token
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            url = f"{base}/dashboard/rounds?offset=0&token=old-secret-token"
            async with http.get(url, allow_redirects=False) as resp:
                assert resp.status == 302
                assert "old-secret-token" not in resp.headers["Location"]
                assert resp.headers["Location"].endswith("offset%3D0")
            url = f"{base}/dashboard/rounds?offset=0&token={token}"
            async with http.get(url, allow_redirects=False) as resp:
                assert resp.status == 302 and COOKIE in resp.cookies
                assert resp.headers["Location"] == "/dashboard/rounds?offset=0"


async def test_token_in_url_is_taken_out_for_a_browser_logged_in_already(
    tmp_path: Path, profile: Profile
) -> None:
    """A browser that has the cookie and opens a login link (the right or a wrong token)
    is redirected to the same page without the token, as docs/dashboard.md says (was
    200 with the token left in the URL, s15-fix15's leftover)."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        token = rc.coord.config.admin_token
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/dashboard/?token={token}", allow_redirects=False) as r:
                assert r.status in (302, 303)
                cookie = r.cookies[COOKIE].value
            jar = {COOKIE: cookie}
            for given in (token, "last-months-token"):
                async with http.get(
                    f"{base}/dashboard/flags?status=open&token={given}",
                    cookies=jar, allow_redirects=False,
                ) as resp:  # fmt: skip
                    assert resp.status in (302, 303), given
                    where = resp.headers["Location"]
                    assert "token" not in where and where.endswith("/dashboard/flags?status=open")
            async with http.get(f"{base}/dashboard/flags", cookies=jar) as resp:
                assert resp.status == 200


async def test_token_in_the_login_form_url_is_taken_out(tmp_path: Path, profile: Profile) -> None:
    """``/dashboard/login?token=...`` showed the login form with the token left in the URL
    (and in the browser's history), unlike every other page: now the right token logs in
    and goes to ``next`` (or the nodes page), a wrong one leads to the form without it."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        token = rc.coord.config.admin_token
        async with aiohttp.ClientSession() as http:
            url = f"{base}/dashboard/login?next=%2Fdashboard%2Fflags&token={token}"
            async with http.get(url, allow_redirects=False) as resp:
                assert resp.status == 302, resp.status
                assert resp.headers["Location"] == "/dashboard/flags"
                assert resp.cookies[COOKIE].value != token
            url = f"{base}/dashboard/login?token={token}&next=//evil.example/"
            async with http.get(url, allow_redirects=False) as resp:
                assert resp.headers["Location"] == "/dashboard/nodes"  # no open redirect
            url = f"{base}/dashboard/login?next=%2Fdashboard%2Fflags&token=old-secret"
            async with http.get(url, allow_redirects=False) as resp:
                assert resp.status == 302 and COOKIE not in resp.cookies
                assert resp.headers["Location"] == "/dashboard/login?next=/dashboard/flags"
