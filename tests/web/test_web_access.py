"""Access control of the admin API and the dashboard: token, loopback only, safe pages."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any
from unittest import mock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from web_support import web_coordinator

from netcheck.config import Profile, load_profile
from netcheck.lab.sample import fill_synthetic
from netcheck.web.access import COOKIE, session_cookie_value


@pytest.fixture
def profile() -> Profile:
    return load_profile("cpu-tiny")


def _remote(address: str) -> Any:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (address, 40000) if name == "peername" else default
    )
    return transport


async def _through_middlewares(app: web.Application, request: web.Request) -> web.StreamResponse:
    async def final(_: web.Request) -> web.StreamResponse:
        return web.Response(text="reached the handler")

    # As aiohttp chains them: the root app's middlewares outermost, then those of the
    # sub-application the path resolves into (the admin API is one).
    match = await app.router.resolve(request)
    match.add_app(app)
    handler: Any = final
    for owner in match.apps[::-1]:
        for mw in reversed(owner.middlewares):
            handler = functools.partial(mw, handler=handler)
    result: web.StreamResponse = await handler(request)
    return result


async def test_admin_api_rejects_missing_and_wrong_tokens(tmp_path: Path, profile: Profile) -> None:
    """/admin/ answers 401 without a bearer token or with a wrong one, 200 with the right one."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        url = f"http://127.0.0.1:{rc.port}/admin/status"
        token = rc.coord.config.admin_token
        async with aiohttp.ClientSession() as http:
            for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": token}):
                async with http.get(url, headers=headers) as resp:
                    assert resp.status == 401, headers
                    text = await resp.text()
                    assert text.startswith("missing or wrong admin token"), text
                    assert "Authorization: Bearer <token>" in text, text
            async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
                assert resp.status == 200
                assert (await resp.json())["connected"] == 0


async def test_non_loopback_callers_are_refused_even_with_the_token(
    tmp_path: Path, profile: Profile
) -> None:
    """A caller from a non-loopback address gets 403 from the admin API and the dashboard."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        app = rc.runner.app
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        for path in ("/admin/status", "/dashboard/nodes", "/export/rounds.csv", "/metrics"):
            for address in ("192.0.2.7", "10.1.2.3", "2001:db8::1"):
                far = make_mocked_request(
                    "GET", path, headers=headers, transport=_remote(address), app=app
                )
                assert far.remote == address
                with pytest.raises(web.HTTPForbidden):
                    await _through_middlewares(app, far)
            near = make_mocked_request(
                "GET", path, headers=headers, transport=_remote("127.0.0.1"), app=app
            )
            assert (await _through_middlewares(app, near)).status == 200


async def test_dashboard_login_cookie_and_token_url(tmp_path: Path, profile: Profile) -> None:
    """Pages redirect to the login form; the form and ?token= set an HMAC cookie, not the token."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        token = rc.coord.config.admin_token
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(f"{base}/dashboard/nodes", allow_redirects=False) as resp:
                assert resp.status == 302
                assert resp.headers["Location"].startswith("/dashboard/login?next=")
            for path in ("/export/rounds.csv", "/metrics"):
                async with http.get(base + path) as resp:
                    assert resp.status == 401
                    text = await resp.text()
                    assert "Authorization: Bearer <token>" in text, text
                    assert "?token= works only as a login link to a /dashboard page" in text
            async with http.get(f"{base}/dashboard/login") as resp:
                page = await resp.text()
                assert 'id="logout"' not in page and 'href="/dashboard/nodes"' not in page
            form = {"token": "wrong", "next": "/dashboard/rounds"}
            async with http.post(f"{base}/dashboard/login", data=form) as resp:
                assert resp.status == 401
            form = {"token": token, "next": "//evil.example/x"}
            async with http.post(
                f"{base}/dashboard/login", data=form, allow_redirects=False
            ) as resp:
                assert resp.status == 302
                assert resp.headers["Location"] == "/dashboard/nodes"  # no open redirect
                cookie = resp.cookies[COOKIE]
                assert cookie.value == session_cookie_value(token) != token
                assert cookie["httponly"] and cookie["samesite"] == "Strict"
            async with http.get(f"{base}/dashboard/nodes", allow_redirects=False) as resp:
                assert resp.status == 200
                assert "script-src" not in resp.headers["Content-Security-Policy"]
                assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(
                f"{base}/dashboard/rounds?offset=0&token={token}", allow_redirects=False
            ) as resp:
                assert resp.status == 302
                assert resp.headers["Location"] == "/dashboard/rounds?offset=0"
                assert COOKIE in resp.cookies
            async with http.get(f"{base}/dashboard/rounds", allow_redirects=False) as resp:
                assert resp.status == 200


async def test_pages_escape_text_that_nodes_control(tmp_path: Path, profile: Profile) -> None:
    """Names and fingerprints from the database are HTML-escaped, never markup."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        evil = "<script>alert(1)</script>"
        key = "ed25519:" + "A" * 43
        rc.coord.store.upsert_node(key, evil, profile.name, "f" * 64, {"model": evil}, 1.0)
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        base = f"http://127.0.0.1:{rc.port}"
        async with aiohttp.ClientSession(headers=headers) as http:
            for path in ("/dashboard/nodes", f"/dashboard/nodes/{key}"):
                async with http.get(base + path) as resp:
                    html = await resp.text()
                    assert resp.status == 200
                    assert evil not in html
                    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
            async with http.get(f"{base}/dashboard/flags") as resp:
                assert resp.status == 200
                assert "no flags" in await resp.text()
            async with http.get(f"{base}/dashboard/rounds/nope") as resp:
                assert resp.status == 404


async def test_root_redirects_to_the_dashboard(tmp_path: Path, profile: Profile) -> None:
    """GET / is a 302 to /dashboard/ (which leads to the login form or the nodes page)."""
    async with (
        web_coordinator(tmp_path, [profile]) as rc,
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{rc.port}/", allow_redirects=False) as resp,
    ):
        assert resp.status == 302
        assert resp.headers["Location"] == "/dashboard/"


async def test_rounds_offset_is_clamped_or_400_never_500(
    tmp_path: Path, profile: Profile, caplog: pytest.LogCaptureFixture
) -> None:
    """?offset= beyond SQLite's INTEGER is clamped; a non-integer is 400; nothing logs an ERROR."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        base = f"http://127.0.0.1:{rc.port}/dashboard/rounds?offset="
        async with aiohttp.ClientSession(headers=headers) as http:
            for offset in ("-5", "0", "99999999999999999999", "9" * 5000):
                async with http.get(base + offset) as resp:
                    assert resp.status == 200, offset[:30]
            for offset in ("abc", "1e9", "1.5"):
                async with http.get(base + offset) as resp:
                    assert resp.status == 400, offset
                    assert await resp.text() == "offset must be an integer"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_unknown_node_round_and_flag_pages_are_404(tmp_path: Path, profile: Profile) -> None:
    """Detail pages of things that do not exist answer 404, not an empty 200."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        base = f"http://127.0.0.1:{rc.port}"
        async with aiohttp.ClientSession(headers=headers) as http:
            for path in ("/dashboard/nodes/ed25519:nope", "/dashboard/rounds/nope",
                         "/dashboard/flags/7", "/dashboard/flags/7/receipts.json"):  # fmt: skip
                async with http.get(base + path) as resp:
                    assert resp.status == 404, path


async def test_login_with_a_broken_form_body_is_400_without_a_traceback(
    tmp_path: Path, profile: Profile, caplog: pytest.LogCaptureFixture
) -> None:
    """Multipart (empty, no boundary) and undecodable form bodies are 400, nothing logged."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        url = f"http://127.0.0.1:{rc.port}/dashboard/login"
        bodies = [
            ("multipart/form-data; boundary=zz", b""),
            ("multipart/form-data", b"--zz\r\n"),
            ("multipart/form-data; boundary=zz", b"--zz\r\nBadHeader\r\n\r\nx\r\n--zz--\r\n"),
            ("application/x-www-form-urlencoded; charset=bogus", b"token=x"),
            ("application/x-www-form-urlencoded", b"token=\xff\xfe"),
        ]
        async with aiohttp.ClientSession() as http:
            for ctype, body in bodies:
                headers = {"Content-Type": ctype}
                async with http.post(url, data=body, headers=headers) as resp:
                    assert resp.status == 400, (ctype, body)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_login_next_with_control_characters_falls_back(
    tmp_path: Path, profile: Profile
) -> None:
    """next="/dashboard\\r\\nX-Evil: 1" redirects to the nodes page (no dropped connection)."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        url = f"http://127.0.0.1:{rc.port}/dashboard/login"
        token = rc.coord.config.admin_token
        async with aiohttp.ClientSession() as http:
            for nxt in ("/dashboard\r\nX-Evil: 1", "/dashboard\nx", "/dashboard\x00", "/dash\\x"):
                form = {"token": token, "next": nxt}
                async with http.post(url, data=form, allow_redirects=False) as resp:
                    assert resp.status == 302, repr(nxt)
                    assert resp.headers["Location"] == "/dashboard/nodes"
                    assert "X-Evil" not in resp.headers
            # In the query string, control characters never reach the page: the app-wide
            # netcheck.web.inputs.refuse_control_chars answers 400 first.
            async with http.get(url, params={"next": "/dashboard\r\nX: 1"}) as resp:
                assert resp.status == 400


async def test_logout_is_post_only_and_refuses_other_origins(
    tmp_path: Path, profile: Profile
) -> None:
    """GET /dashboard/logout does nothing (405); a cross-origin POST is 403; ours clears it."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        token = rc.coord.config.admin_token
        jar = aiohttp.CookieJar(unsafe=True)  # keep cookies of an IP-address host
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            async with http.post(f"{base}/dashboard/login", data={"token": token}) as resp:
                assert resp.status == 200
                assert resp.url.path == "/dashboard/nodes"  # logged in
                assert '<form method="post" action="/dashboard/logout"' in await resp.text()
            async with http.get(f"{base}/dashboard/logout", allow_redirects=False) as resp:
                assert resp.status == 405
            refused = [
                {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
                {"Sec-Fetch-Site": "same-site"},  # another port on localhost
                {"Origin": "http://127.0.0.1:1"},
            ]
            for headers in refused:
                async with http.post(
                    f"{base}/dashboard/logout", headers=headers, allow_redirects=False
                ) as resp:
                    assert resp.status == 403, headers
                    assert COOKIE not in resp.cookies
            async with http.get(f"{base}/dashboard/nodes", allow_redirects=False) as resp:
                assert resp.status == 200  # still logged in
            same = {"Origin": base, "Sec-Fetch-Site": "same-origin"}
            async with http.post(
                f"{base}/dashboard/logout", headers=same, allow_redirects=False
            ) as resp:
                assert resp.status == 302
                assert resp.headers["Location"] == "/dashboard/login"
                assert resp.cookies[COOKIE].value == ""
            async with http.get(f"{base}/dashboard/nodes", allow_redirects=False) as resp:
                assert resp.status == 302  # logged out: back to the login form


async def test_a_new_token_logs_every_browser_out(tmp_path: Path, profile: Profile) -> None:
    """The cookie is an HMAC of the token: once the token changes (docs/dashboard.md,
    "Logging in"), the old cookie leads to the login form again; a cookie holding the
    token itself is never a session."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        old = rc.coord.config.admin_token
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            form = {"token": old, "next": "/dashboard/flags"}
            async with http.post(f"{base}/dashboard/login", data=form) as resp:
                assert resp.status == 200 and str(resp.url).endswith("/dashboard/flags")
            # a restart with a new admin_token, as the dashboard sees it
            rotated = rc.coord.config.model_copy(update={"admin_token": old + "-rotated"})
            rc.coord.config = rotated
            async with http.get(f"{base}/dashboard/flags", allow_redirects=False) as resp:
                assert resp.status == 302
                assert resp.headers["Location"].startswith("/dashboard/login?next=")
        for cookie in (old, rc.coord.config.admin_token, session_cookie_value(old)):
            async with (
                aiohttp.ClientSession(cookies={COOKIE: cookie}) as http,
                http.get(f"{base}/export/flags.csv") as resp,
            ):
                assert resp.status == 401, cookie
        new_cookie = session_cookie_value(rc.coord.config.admin_token)
        async with (
            aiohttp.ClientSession(cookies={COOKIE: new_cookie}) as http,
            http.get(f"{base}/export/flags.csv") as resp,
        ):
            assert resp.status == 200


async def test_every_private_answer_is_neither_cached_nor_sniffed(
    tmp_path: Path, profile: Profile
) -> None:
    """Only the HTML pages carried ``nosniff`` and ``no-store``: exports, receipts,
    metrics, the admin API and their errors (a 404 echoing the URL, a 401) had neither,
    so a browser kept evidence exports in its disk cache."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        fill_synthetic(rc.coord.store, n_rounds=3, n_honest=2, seed=1)
        base = f"http://127.0.0.1:{rc.port}"
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        paths = ("/export/flags.csv", "/export/rounds.json", "/export/x<b>.csv", "/metrics",
                 "/dashboard/flags/1/receipts.json", "/dashboard/nope", "/dashboard/nodes",
                 "/admin/flags/1", "/admin/flags/x")  # fmt: skip
        async with aiohttp.ClientSession() as http:
            for path, sent in [(p, headers) for p in paths] + [("/export/flags.csv", {})]:
                async with http.get(base + path, headers=sent, allow_redirects=False) as resp:
                    got = (resp.headers.get("X-Content-Type-Options"),
                           resp.headers.get("Cache-Control"))  # fmt: skip
                    assert got == ("nosniff", "no-store"), (path, resp.status, got)
            async with http.get(base + "/", allow_redirects=False) as resp:
                assert "X-Content-Type-Options" not in resp.headers  # not a private path


#: Routes that need no admin token: the node endpoint, the node's doctor query (signed),
#: the redirects to the dashboard and the login form itself (docs/dashboard.md).
PUBLIC = {("GET", "/v1/ws"), ("POST", "/v1/doctor"), ("GET", "/"), ("GET", "/dashboard/login"),
          ("POST", "/dashboard/login"), ("POST", "/dashboard/logout")}  # fmt: skip


def _every_route(app: web.Application) -> list[tuple[str, str]]:
    """(method, path with each {name} filled) of every route, sub-applications included
    (their resources carry the mount prefix already)."""
    out: list[tuple[str, str]] = []
    for resource in app.router.resources():
        sub = getattr(resource, "_app", None)
        if isinstance(sub, web.Application):
            out += _every_route(sub)
            continue
        path = resource.canonical
        path = path.replace("{kind}.{fmt}", "rounds.csv").replace("{fmt}", "csv")
        for part in ("{node_key}", "{round_id}", "{flag_id}", "{job_id}"):
            path = path.replace(part, "1")
        out += [(route.method, path) for route in resource if route.method != "HEAD"]
    return out


async def test_every_route_but_the_public_ones_needs_the_token(
    tmp_path: Path, profile: Profile
) -> None:
    """Walks the application's routes (so a route added later is covered too): without
    credentials, or with the right token in the query string of anything but a page
    GET, each is refused (401; a page GET: 302 to the login form) before it runs."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        routes = _every_route(rc.runner.app)
        assert ("DELETE", "/admin/screening/jobs/1") in routes
        assert ("POST", "/admin/flags/1/review") in routes
        base = f"http://127.0.0.1:{rc.port}"
        token = rc.coord.config.admin_token
        async with aiohttp.ClientSession() as http:
            for method, path in routes:
                if (method, path) in PUBLIC:
                    continue
                page = method == "GET" and path.startswith("/dashboard")
                for query in ("", f"?token={token}"):
                    async with http.request(
                        method, base + path + query, json={}, allow_redirects=False
                    ) as resp:
                        want = 302 if page else 401
                        assert resp.status == want, (method, path, query[:1], resp.status)
                        if page and query:  # a login link: exchanged, then taken out
                            assert token not in resp.headers["Location"]
                        elif page:
                            assert resp.headers["Location"].startswith("/dashboard/login?")
        assert len(routes) > 25
