"""Access to the dashboard (docs/dashboard.md, "Logging in"): the admin token as a bearer
header, a one-time ``?token=`` login link to a dashboard page (refused on every other
path), or an HttpOnly session cookie holding an HMAC of it; loopback
callers only unless ``allow_remote``; cross-origin form posts refused.

:class:`AccessMixin` is the access half of :class:`netcheck.web.pages.Dashboard`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import quote

from aiohttp import web

from netcheck.web.inputs import (
    TOKEN_IN_URL_REFUSED,
    TOKEN_REFUSED,
    bearer_token,
    has_control_chars,
    token_matches,
)

if TYPE_CHECKING:
    from netcheck.web.view import CoordinatorView

COOKIE = "netcheck_dashboard"
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def session_cookie_value(admin_token: str) -> str:
    """The dashboard cookie for a token: HMAC-SHA256(token, label), hex (not the token)."""
    return hmac.new(
        admin_token.encode(), b"netcheck dashboard session v1", hashlib.sha256
    ).hexdigest()


def is_loopback(remote: str | None) -> bool:
    """True for 127.0.0.0/8 and ::1 peers."""
    try:
        return bool(remote) and ipaddress.ip_address(str(remote)).is_loopback
    except ValueError:
        return False


def protected(path: str) -> bool:
    """Paths behind the dashboard's access check: the dashboard, exports and metrics."""
    return (
        path == "/dashboard"
        or path.startswith("/dashboard/")
        or path.startswith("/export/")
        or path == "/metrics"
    )


def safe_next(target: str | None) -> str:
    """``target`` if it is a dashboard or export path on this server, else the nodes page.

    Refuses ``//`` and backslashes (another host to a browser) and control characters
    (CR LF would inject a header into the ``Location`` of the redirect).
    """
    if (
        target
        and target.startswith(("/dashboard", "/export/"))
        and "//" not in target
        and "\\" not in target
        and not has_control_chars(target)
    ):
        return target
    return "/dashboard/nodes"


def cross_origin(request: web.Request) -> bool:
    """True when a browser says this request comes from a page of another origin.

    Browsers send ``Sec-Fetch-Site`` (``same-origin`` for our own forms, ``none`` when
    the user typed the URL) and ``Origin`` on every form POST; scripts send neither,
    and are not refused.
    """
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    origin = request.headers.get("Origin")
    return origin is not None and origin != f"{request.scheme}://{request.host}"


#: Headers of every answer on a protected path or ``/admin/`` (pages set them too):
#: exports, receipts, metrics and error texts hold node keys, evidence, reflected URL
#: text; not cached (a shared analyst machine keeps no copy on disk) and never sniffed
#: as another type than the one sent.
PRIVATE_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}


async def private_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare`` hook: :data:`PRIVATE_HEADERS` on the answers of the
    dashboard, exports, metrics and the admin API, errors (401, 403, 404) included."""
    if protected(request.path) or request.path.startswith("/admin/"):
        for name, value in PRIVATE_HEADERS.items():
            response.headers.setdefault(name, value)


class AccessMixin:
    """Token checks, the session cookie and the access middleware of the dashboard."""

    view: CoordinatorView
    allow_remote: bool

    def token_ok(self, candidate: str) -> bool:
        return token_matches(candidate, self.view.admin_token)

    def authorized(self, request: web.Request) -> bool:
        token = bearer_token(request.headers.get("Authorization", ""))
        if token is not None and self.token_ok(token):
            return True
        cookie = request.cookies.get(COOKIE, "")
        expected = session_cookie_value(self.view.admin_token)
        return bool(cookie) and token_matches(cookie, expected)

    def with_cookie(self, location: str) -> web.Response:
        resp = web.Response(status=302, headers={"Location": location})
        resp.set_cookie(
            COOKIE,
            session_cookie_value(self.view.admin_token),
            httponly=True,
            samesite="Strict",
            path="/",
        )
        return resp

    @web.middleware
    async def dashboard_auth(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        path = request.path
        if not protected(path):
            return await handler(request)
        if not self.allow_remote and not is_loopback(request.remote):
            raise web.HTTPForbidden(text="the dashboard is loopback-only")
        # Tokens in URLs end up in browser history, shell history, scrape configs and
        # proxy logs (docs/dashboard.md, "Tokens in URLs"): ?token= is only a one-time
        # login link for a dashboard page, exchanged for the cookie and taken out of
        # the URL; anywhere else it is refused, even beside a valid header or cookie
        # (the request still put the token in a URL), and it is never copied into a URL.
        page = request.method == "GET" and path.startswith("/dashboard")
        query_token = request.query.get("token")
        if query_token is not None and not page:
            raise web.HTTPUnauthorized(text=TOKEN_IN_URL_REFUSED)
        rest = request.rel_url.with_query({k: v for k, v in request.query.items() if k != "token"})
        if path == "/dashboard/login" and query_token is not None:
            # a login link to the form itself: logs in like any page, never left in the URL
            if self.token_ok(query_token):
                return self.with_cookie(safe_next(request.query.get("next")))
            raise web.HTTPFound(str(rest))
        if path in ("/dashboard/login", "/dashboard/logout"):
            return await handler(request)
        if query_token is not None:  # a page here: every other ?token= was refused above
            if self.token_ok(query_token):
                return self.with_cookie(str(rest))
            if self.authorized(request):  # logged in already: only take it out of the URL
                raise web.HTTPFound(str(rest))
        elif self.authorized(request):
            return await handler(request)
        if page:
            raise web.HTTPFound("/dashboard/login?next=" + quote(str(rest), safe=""))
        raise web.HTTPUnauthorized(text=TOKEN_REFUSED)
