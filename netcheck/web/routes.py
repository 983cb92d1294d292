"""The analyst dashboard, exports and metrics as routes on the coordinator's aiohttp app.

Routes (all read-only; ``/`` redirects to ``/dashboard/``):

- ``/dashboard/nodes``, ``/dashboard/nodes/{node_key}`` — nodes table, one node's
  latency history and verdicts.
- ``/dashboard/rounds``, ``/dashboard/rounds/{round_id}`` — rounds, one round's verdicts,
  release skew and release/arrival timeline.
- ``/dashboard/flags``, ``/dashboard/flags/{flag_id}``,
  ``/dashboard/flags/{flag_id}/receipts.json`` — screening flags and their evidence.
- ``/dashboard/exports``; ``/export/{rounds,verdicts,timings,flags}.{csv,json}``.
- ``/metrics`` — Prometheus text format (:mod:`netcheck.web.metrics`).
- ``/dashboard/login`` (form, POST to log in), ``POST /dashboard/logout``.

Access (docs/dashboard.md): the same admin token as the admin API, and loopback callers
only (like ``/admin/``; reach a remote coordinator through an SSH tunnel). A browser logs
in once through the form, or by opening any dashboard URL with ``?token=...`` (the token
is then dropped from the URL); both set an HttpOnly, SameSite=Strict cookie holding an
HMAC of the token, never the token itself. Scripts and Prometheus send
``Authorization: Bearer <token>``. Pages carry a strict Content-Security-Policy: no
script runs, plots are inline SVG rendered on the server.

Logging in and out are form POSTs (``GET /dashboard/logout`` is a 405; logging out needs
no token). A browser POST whose ``Origin`` or ``Sec-Fetch-Site`` says it came from
another origin is refused (403), so another site (even another port on localhost, which
SameSite counts as the same site) cannot log a browser out. The login form must be
``application/x-www-form-urlencoded`` (multipart is a 400). Query parameters and form bodies are checked by :mod:`netcheck.web.inputs`:
bad ones are a 400, never a 500. Every answer there and on ``/admin/`` (exports, receipts,
metrics, errors) is sent with ``X-Content-Type-Options: nosniff`` and
``Cache-Control: no-store`` (:data:`netcheck.web.access.PRIVATE_HEADERS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiohttp import web

from netcheck.storage.reader import Reader
from netcheck.web.access import private_headers
from netcheck.web.banner import pool_middleware
from netcheck.web.pages import Dashboard
from netcheck.web.unavailable import storage_errors

if TYPE_CHECKING:
    from netcheck.web.view import CoordinatorView

WEB_KEY = web.AppKey("netcheck_web_reader", Reader)


def add_web_routes(
    app: web.Application,
    coord: CoordinatorView,
    *,
    allow_remote: bool = False,
    capacity_warnings: Sequence[str] = (),
) -> None:
    """Register the dashboard, exports and ``/metrics`` (and their auth) on ``app``:
    the handlers of one :class:`~netcheck.web.pages.Dashboard` over ``coord``.

    Call before the app starts (:func:`netcheck.coordinator.assembly.make_app`). Calling
    it twice on one app does nothing the second time.

    Args:
        allow_remote: serve non-loopback callers too (still token-protected). Off by
            default, like the admin API.
        capacity_warnings: lines shown at the top of every page (issue 10: profiles
            that cannot tell two identities on one card apart, netcheck.capacity).
    """
    if WEB_KEY in app:
        return
    d = Dashboard(coord, allow_remote=allow_remote, capacity_warnings=capacity_warnings)
    app[WEB_KEY] = d.reader
    app.middlewares.append(d.dashboard_auth)
    app.on_response_prepare.append(private_headers)  # nosniff, no-store
    # inside the auth check: a failing database is a 503 naming it, banner included
    app.middlewares.append(storage_errors(("/dashboard", "/export/", "/metrics")))
    app.middlewares.append(pool_middleware(coord))  # inside the auth check
    r = app.router
    r.add_get("/", d.root)
    r.add_get("/dashboard", d.index)
    r.add_get("/dashboard/", d.index)
    r.add_get("/dashboard/login", d.login_form)
    r.add_post("/dashboard/login", d.login)
    r.add_post("/dashboard/logout", d.logout)
    r.add_get("/dashboard/nodes", d.nodes_page)
    r.add_get("/dashboard/nodes/{node_key}", d.node_page)
    r.add_get("/dashboard/rounds", d.rounds_page)
    r.add_get("/dashboard/rounds/{round_id}", d.round_page)
    r.add_get("/dashboard/flags", d.flags_page)
    r.add_get("/dashboard/flags/{flag_id}", d.flag_page)
    r.add_get("/dashboard/flags/{flag_id}/receipts.json", d.flag_receipts)
    r.add_get("/dashboard/exports", d.exports_page)
    r.add_get("/export/{kind}.{fmt:csv|json}", d.export)
    r.add_get("/metrics", d.metrics)
