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
bad ones are a 400, never a 500.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from netcheck.storage.reader import STRIKE_WINDOW, Reader
from netcheck.web.exports import KINDS, to_csv, to_json
from netcheck.web.flagview import FlagView, flag_view
from netcheck.web.inputs import MAX_OFFSET, has_control_chars, query_int
from netcheck.web.metrics import metrics_text
from netcheck.web.plots import (
    heatmap_svg,
    latency_history_svg,
    loaded_latency_svg,
    round_timeline_svg,
)
from netcheck.web.templates import label, make_env

if TYPE_CHECKING:
    from netcheck.coordinator.server import Coordinator

COOKIE = "netcheck_dashboard"
WEB_KEY = web.AppKey("netcheck_web_reader", Reader)
PAGE_SIZE = 100
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
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


def _protected(path: str) -> bool:
    return (
        path == "/dashboard"
        or path.startswith("/dashboard/")
        or path.startswith("/export/")
        or path == "/metrics"
    )


def _safe_next(target: str | None) -> str:
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


def coload_matrix(members: list[str], loaded: dict[str, list[bool]]) -> list[list[float | None]]:
    """Rounds in which both nodes were loaded (diagonal: rounds the node was loaded)."""
    return [
        [float(sum(x and y for x, y in zip(loaded[a], loaded[b], strict=True))) for b in members]
        for a in members
    ]


def residual_correlation_matrix(
    members: list[str], everyone: dict[str, Any], min_rounds: int = 3
) -> list[list[float | None]]:
    """Pearson r between members' residual log service times, over rounds both were timed.

    Residuals come from a median polish (:func:`netcheck.analysis.timing.median_polish`)
    of every node's log service time in those rounds (``everyone``, a
    :meth:`Reader.timing_matrix` over all nodes), so per-node speed and per-round effects
    are removed as the detectors do. ``None`` where fewer than ``min_rounds`` rounds are
    shared or a series is constant.
    """
    from netcheck.analysis.timing import median_polish

    keys: list[str] = list(everyone["node_keys"])
    n_rounds = len(everyone["round_ids"])
    if not members or not n_rounds:
        return [[None] * len(members) for _ in members]
    y = np.array(
        [
            [math.log(max(s, 1e-6)) if s is not None else np.nan for s in everyone["service_s"][k]]
            for k in keys
        ],
        dtype=np.float64,
    ).reshape(len(keys), n_rounds)
    resid = median_polish(y).residuals
    row = {k: i for i, k in enumerate(keys)}
    empty = np.full(n_rounds, np.nan)
    series = [resid[row[m]] if m in row else empty for m in members]
    out: list[list[float | None]] = []
    for i, a_full in enumerate(series):
        cells: list[float | None] = []
        for j, b_full in enumerate(series):
            both = np.isfinite(a_full) & np.isfinite(b_full)
            a, b = a_full[both], b_full[both]
            if len(a) < min_rounds or a.std() == 0 or b.std() == 0:
                cells.append(None)
            else:
                cells.append(1.0 if i == j else float(np.corrcoef(a, b)[0, 1]))
        out.append(cells)
    return out


def add_web_routes(app: web.Application, coord: Coordinator, *, allow_remote: bool = False) -> None:
    """Register the dashboard, exports and ``/metrics`` (and their auth) on ``app``.

    Call before the app starts (``Coordinator.make_app``). Calling it twice on one app
    does nothing the second time.

    Args:
        allow_remote: serve non-loopback callers too (still token-protected). Off by
            default, like the admin API.
    """
    if WEB_KEY in app:
        return
    reader = Reader(coord.store)
    app[WEB_KEY] = reader
    env = make_env()

    def token_ok(candidate: str) -> bool:
        return hmac.compare_digest(candidate.encode(), coord.config.admin_token.encode())

    def authorized(request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer ") and token_ok(header.removeprefix("Bearer ").strip()):
            return True
        cookie = request.cookies.get(COOKIE, "")
        expected = session_cookie_value(coord.config.admin_token)
        return bool(cookie) and hmac.compare_digest(cookie.encode(), expected.encode())

    def with_cookie(location: str) -> web.Response:
        resp = web.Response(status=302, headers={"Location": location})
        resp.set_cookie(
            COOKIE,
            session_cookie_value(coord.config.admin_token),
            httponly=True,
            samesite="Strict",
            path="/",
        )
        return resp

    @web.middleware
    async def dashboard_auth(request: web.Request, handler: _Handler) -> web.StreamResponse:
        path = request.path
        if not _protected(path):
            return await handler(request)
        if not allow_remote and not is_loopback(request.remote):
            raise web.HTTPForbidden(text="the dashboard is loopback-only")
        if path in ("/dashboard/login", "/dashboard/logout") or authorized(request):
            return await handler(request)
        query_token = request.query.get("token")
        if query_token is not None and token_ok(query_token):
            if request.method == "GET" and path.startswith("/dashboard"):
                rest = {k: v for k, v in request.query.items() if k != "token"}
                return with_cookie(str(request.rel_url.with_query(rest)))
            return await handler(request)
        if path.startswith("/dashboard") and request.method == "GET":
            raise web.HTTPFound("/dashboard/login?next=" + quote(request.path_qs, safe=""))
        raise web.HTTPUnauthorized(text="missing or wrong admin token")

    def page(name: str, status: int = 200, **context: Any) -> web.Response:
        html = env.get_template(name).render(**context)
        return web.Response(
            text=html,
            status=status,
            content_type="text/html",
            headers={
                "Content-Security-Policy": CSP,
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "no-store",
            },
        )

    def not_found(message: str) -> web.Response:
        return page("error.html", 404, title="404 not found", message=message)

    # -- login -------------------------------------------------------------------------

    async def login_form(request: web.Request) -> web.Response:
        return page("login.html", next=_safe_next(request.query.get("next")), error="")

    async def login(request: web.Request) -> web.Response:
        if cross_origin(request):
            raise web.HTTPForbidden(text="cross-origin login refused")
        if request.content_type == "multipart/form-data":  # our form never sends it
            raise web.HTTPBadRequest(text="log in with an application/x-www-form-urlencoded form")
        try:
            data = await request.post()
        except (ValueError, LookupError, HttpProcessingError):  # bad encoding or charset
            raise web.HTTPBadRequest(text="malformed form body") from None
        token, target = data.get("token"), data.get("next")
        nxt = _safe_next(target if isinstance(target, str) else None)
        if isinstance(token, str) and token_ok(token):
            return with_cookie(nxt)
        return page("login.html", 401, next=nxt, error="wrong token")

    async def logout(request: web.Request) -> web.Response:
        if cross_origin(request):
            raise web.HTTPForbidden(text="cross-origin logout refused")
        resp = web.Response(status=302, headers={"Location": "/dashboard/login"})
        resp.del_cookie(COOKIE, path="/", httponly=True, samesite="Strict")
        return resp

    async def index(request: web.Request) -> web.Response:
        raise web.HTTPFound("/dashboard/nodes")

    async def root(request: web.Request) -> web.Response:
        raise web.HTTPFound("/dashboard/")

    # -- pages -------------------------------------------------------------------------

    def all_flags() -> list[FlagView]:
        return [flag_view(r) for r in reader.flags()]

    async def nodes_page(request: web.Request) -> web.Response:
        held = await coord.held_by()  # several gateways: node -> the gateway holding it
        connected = set(coord.sessions) if held is None else set(held)

        def build() -> dict[str, Any]:
            rows = reader.node_summaries()
            per_node = Counter(m for f in all_flags() for m in f.members)
            for r in rows:
                r["connected"] = r["node_key"] in connected
                r["flags"] = per_node.get(r["node_key"], 0)
                if held is not None:
                    r["gateway"] = held.get(r["node_key"], {}).get("gateway_id", "")
            return {"nodes": rows, "connected": len(connected), "window": STRIKE_WINDOW,
                    "gateways": held is not None}  # fmt: skip

        return page("nodes.html", **await asyncio.to_thread(build))

    async def node_page(request: web.Request) -> web.Response:
        key = request.match_info["node_key"]
        connected = key in coord.sessions

        def build() -> dict[str, Any] | None:
            node = reader.node(key)
            if node is None:
                return None
            history = reader.node_history(key)
            passed = sum(1 for h in history if h["passed"])
            return {
                "n": node,
                "connected": connected,
                "history": history,
                "pass_rate": passed / len(history) if history else None,
                "flags": [f for f in all_flags() if key in f.members],
                "latency": latency_history_svg(history),
            }

        ctx = await asyncio.to_thread(build)
        return not_found(f"no node {key}") if ctx is None else page("node.html", **ctx)

    async def rounds_page(request: web.Request) -> web.Response:
        offset = query_int(request.query, "offset", default=0, lo=0, hi=MAX_OFFSET, clamp=True)

        def build() -> dict[str, Any]:
            return {
                "rounds": reader.rounds(PAGE_SIZE, offset),
                "total": reader.count_rounds(),
                "offset": offset,
                "limit": PAGE_SIZE,
            }

        return page("rounds.html", **await asyncio.to_thread(build))

    async def round_page(request: web.Request) -> web.Response:
        rid = request.match_info["round_id"]

        def build() -> dict[str, Any] | None:
            r = reader.round(rid)
            if r is None:
                return None
            rows = reader.round_nodes(rid)
            released = [int(x["released_ns"]) for x in rows if x["released_ns"] is not None]
            t0 = min(released) if released else 0
            for x in rows:
                for src, dst in (("released_ns", "rel_ms"), ("arrived_ns", "arr_ms")):
                    ns = x[src]
                    x[dst] = "–" if ns is None else f"{(int(ns) - t0) / 1e6:.3f} ms"
            names = {x["node_key"]: x.get("name") for x in rows}
            return {
                "r": r,
                "summary": r["summary"] or {},
                "rows": rows,
                "timeline": round_timeline_svg(rows, lambda k: label(k, names.get(k))),
            }

        ctx = await asyncio.to_thread(build)
        return not_found(f"no round {rid}") if ctx is None else page("round.html", **ctx)

    async def flags_page(request: web.Request) -> web.Response:
        node = request.query.get("node")

        def build() -> dict[str, Any]:
            flags = all_flags()
            if node:
                flags = [f for f in flags if node in f.members]
            names = reader.node_names(sorted({m for f in flags for m in f.members}))
            return {
                "flags": flags,
                "node": node,
                "names": names,
                "has_table": bool(reader.flag_columns()),
            }

        return page("flags.html", **await asyncio.to_thread(build))

    def find_flag(flag_id: str) -> FlagView | None:
        return next((f for f in all_flags() if f.flag_id == flag_id), None)

    async def flag_page(request: web.Request) -> web.Response:
        fid = request.match_info["flag_id"]

        def build() -> dict[str, Any] | None:
            f = find_flag(fid)
            if f is None:
                return None
            members = list(f.members)
            matrix = reader.timing_matrix(members, f.round_ids)
            everyone = reader.timing_matrix(None, matrix["round_ids"])
            names = reader.node_names(members)
            labels = [label(k, names.get(k)) for k in members]
            edge_cols: list[str] = []
            for e in f.edges:
                edge_cols += [k for k in e if k not in edge_cols]
            return {
                "f": f,
                "matrix": matrix,
                "edge_cols": edge_cols,
                "names": names,
                "loaded_plot": loaded_latency_svg(
                    members, matrix["loaded"], matrix["service_s"], lambda k: label(k, names.get(k))
                ),
                "coload_plot": heatmap_svg(
                    coload_matrix(members, matrix["loaded"]), labels, "co-loaded rounds"
                ),
                "corr_plot": heatmap_svg(
                    residual_correlation_matrix(members, everyone),
                    labels,
                    "residual correlation r",
                    vmin=-1.0,
                    vmax=1.0,
                    fmt="{:.2f}",
                    cmap="RdBu_r",
                ),  # fmt: skip
            }

        ctx = await asyncio.to_thread(build)
        return not_found(f"no flag {fid}") if ctx is None else page("flag.html", **ctx)

    async def flag_receipts(request: web.Request) -> web.Response:
        fid = request.match_info["flag_id"]

        def build() -> dict[str, Any] | None:
            f = find_flag(fid)
            if f is None:
                return None
            return {
                "flag_id": f.flag_id,
                "members": list(f.members),
                "verify_with": "netcheck receipt verify (docs/protocol.md §7.3)",
                "receipts": reader.receipts(list(f.members), f.round_ids),
            }

        data = await asyncio.to_thread(build)
        if data is None:
            return not_found(f"no flag {fid}")
        return web.Response(
            text=json.dumps(data),
            content_type="application/json",
            headers={
                "Content-Disposition": f'attachment; filename="flag-{quote(fid)}-receipts.json"'
            },
        )

    async def exports_page(request: web.Request) -> web.Response:
        return page("exports.html", kinds=KINDS)

    # -- exports and metrics ------------------------------------------------------------

    async def export(request: web.Request) -> web.Response:
        kind, fmt = request.match_info["kind"], request.match_info["fmt"]
        if kind not in KINDS:
            raise web.HTTPNotFound(text=f"no export {kind!r}; one of {', '.join(KINDS)}")
        round_id = request.query.get("round_id") or None

        def build() -> str:
            cols, rows = reader.export_rows(kind, round_id)
            if fmt == "csv":
                return to_csv(cols, rows)
            return to_json(kind, cols, reader.column_types(kind), rows)

        text = await asyncio.to_thread(build)
        ctype = "text/csv" if fmt == "csv" else "application/json"
        return web.Response(
            text=text,
            content_type=ctype,
            headers={"Content-Disposition": f'attachment; filename="{kind}.{fmt}"'},
        )

    async def metrics(request: web.Request) -> web.Response:
        body = metrics_text(coord)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    app.middlewares.append(dashboard_auth)
    r = app.router
    r.add_get("/", root)
    r.add_get("/dashboard", index)
    r.add_get("/dashboard/", index)
    r.add_get("/dashboard/login", login_form)
    r.add_post("/dashboard/login", login)
    r.add_post("/dashboard/logout", logout)
    r.add_get("/dashboard/nodes", nodes_page)
    r.add_get("/dashboard/nodes/{node_key}", node_page)
    r.add_get("/dashboard/rounds", rounds_page)
    r.add_get("/dashboard/rounds/{round_id}", round_page)
    r.add_get("/dashboard/flags", flags_page)
    r.add_get("/dashboard/flags/{flag_id}", flag_page)
    r.add_get("/dashboard/flags/{flag_id}/receipts.json", flag_receipts)
    r.add_get("/dashboard/exports", exports_page)
    r.add_get("/export/{kind}.{fmt:csv|json}", export)
    r.add_get("/metrics", metrics)
