"""The dashboard's pages, exports and metrics endpoint (the handlers of
:mod:`netcheck.web.routes`), as methods of one :class:`Dashboard` per application.

Every page reads through :class:`~netcheck.storage.reader.Reader` in a worker thread and
renders a Jinja2 template with server-side SVG plots (:mod:`netcheck.web.plots`).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from netcheck.storage.durable import spooled_status
from netcheck.storage.reader import STRIKE_WINDOW, UNCHECKED, Reader, pass_rate
from netcheck.storage.reviews import ReviewStore
from netcheck.web.access import COOKIE, AccessMixin, cross_origin, safe_next
from netcheck.web.banner import POOL
from netcheck.web.exports import KINDS, presented, to_csv, to_json
from netcheck.web.flagview import EDGE_HEADERS, EDGE_TESTS, FlagView, flag_view
from netcheck.web.inputs import MAX_OFFSET, query_int
from netcheck.web.metrics import metrics_text
from netcheck.web.plots import (
    heatmap_svg,
    latency_history_svg,
    loaded_latency_svg,
    round_timeline_svg,
)
from netcheck.web.templates import label, make_env

if TYPE_CHECKING:
    from netcheck.web.view import CoordinatorView

PAGE_SIZE = 100
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


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
    are removed as the detectors do (round effects shrunk as
    :attr:`DetectorConfig.round_prior_cells` says). ``None`` where fewer than ``min_rounds`` rounds are
    shared or a series is constant.
    """
    from netcheck.analysis.detector_config import DetectorConfig
    from netcheck.analysis.timing import MIN_SERVICE_S, median_polish

    keys: list[str] = list(everyone["node_keys"])
    n_rounds = len(everyone["round_ids"])
    if not members or not n_rounds:
        return [[None] * len(members) for _ in members]
    y = np.array(
        [
            [
                math.log(max(s, MIN_SERVICE_S)) if s is not None else np.nan
                for s in everyone["service_s"][k]
            ]
            for k in keys
        ],
        dtype=np.float64,
    ).reshape(len(keys), n_rounds)
    resid = median_polish(y, col_prior_cells=DetectorConfig().round_prior_cells).residuals
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


class Dashboard(AccessMixin):
    """The dashboard of one coordinator: its read-only view, reader and templates.

    Args:
        view: what the dashboard may see of the coordinator.
        allow_remote: serve non-loopback callers too (still token-protected).
        capacity_warnings: lines shown at the top of every page (netcheck.capacity).
    """

    def __init__(
        self,
        view: CoordinatorView,
        *,
        allow_remote: bool = False,
        capacity_warnings: Sequence[str] = (),
    ) -> None:
        self.view = view
        self.allow_remote = allow_remote
        self.reader = Reader(view.store)
        self.env = make_env()
        self.env.globals["capacity_warnings"] = list(capacity_warnings)
        self._reviews: ReviewStore | None = None

    def reviews(self) -> ReviewStore:
        """Flag reviews (created on first use: creates its table if missing)."""
        if self._reviews is None:
            self._reviews = ReviewStore(self.view.store)
        return self._reviews

    def page(self, name: str, status: int = 200, **context: Any) -> web.Response:
        context.setdefault("pool", POOL.get() or [])  # the canary-pool banner (web.banner)
        html = self.env.get_template(name).render(**context)
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

    def not_found(self, message: str) -> web.Response:
        return self.page("error.html", 404, title="404 not found", message=message)

    # -- login -------------------------------------------------------------------------

    async def login_form(self, request: web.Request) -> web.Response:
        return self.page("login.html", next=safe_next(request.query.get("next")), error="")

    async def login(self, request: web.Request) -> web.Response:
        if cross_origin(request):
            raise web.HTTPForbidden(text="cross-origin login refused")
        if request.content_type == "multipart/form-data":  # our form never sends it
            raise web.HTTPBadRequest(text="log in with an application/x-www-form-urlencoded form")
        try:
            data = await request.post()
        except (ValueError, LookupError, HttpProcessingError):  # bad encoding or charset
            raise web.HTTPBadRequest(text="malformed form body") from None
        token, target = data.get("token"), data.get("next")
        nxt = safe_next(target if isinstance(target, str) else None)
        if isinstance(token, str) and self.token_ok(token):
            return self.with_cookie(nxt)
        return self.page("login.html", 401, next=nxt, error="wrong token")

    async def logout(self, request: web.Request) -> web.Response:
        if cross_origin(request):
            raise web.HTTPForbidden(text="cross-origin logout refused")
        resp = web.Response(status=302, headers={"Location": "/dashboard/login"})
        resp.del_cookie(COOKIE, path="/", httponly=True, samesite="Strict")
        return resp

    async def index(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/dashboard/nodes")

    async def root(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/dashboard/")

    # -- pages -------------------------------------------------------------------------

    def all_flags(self) -> list[FlagView]:
        return [flag_view(f.as_dict()) for f in self.reader.flags()]

    async def nodes_page(self, request: web.Request) -> web.Response:
        held = await self.view.held_by()  # several gateways: node -> the gateway holding it
        connected = set(self.view.connected_keys()) if held is None else set(held)

        def build() -> dict[str, Any]:
            rows = self.reader.node_summaries()
            per_node = Counter(m for f in self.all_flags() for m in f.members)
            hosts = self.view.node_hosts()
            for r in rows:
                r["connected"] = r["node_key"] in connected
                r["flags"] = per_node.get(r["node_key"], 0)
                r["host"] = hosts.get(r["node_key"], "")
                if held is not None:
                    r["gateway"] = held.get(r["node_key"], {}).get("gateway_id", "")
            return {"nodes": rows, "connected": len(connected), "window": STRIKE_WINDOW,
                    "gateways": held is not None, "hosts": bool(hosts)}  # fmt: skip

        return self.page("nodes.html", **await asyncio.to_thread(build))

    async def node_page(self, request: web.Request) -> web.Response:
        key = request.match_info["node_key"]
        connected = key in self.view.connected_keys()

        def build() -> dict[str, Any] | None:
            node = self.reader.node(key)
            if node is None:
                return None
            history = self.reader.node_history(key)
            hosts = self.view.node_hosts()
            host = hosts.get(key, "")
            peers = sorted(k for k, h in hosts.items() if h == host and k != key) if host else []
            passed = sum(1 for h in history if h["passed"])
            checked = sum(1 for h in history if h["verdict"] != UNCHECKED)
            return {
                "n": node,
                "connected": connected,
                "history": history,
                "pass_rate": pass_rate(passed, checked),
                "checked": checked,
                "flags": [f for f in self.all_flags() if key in f.members],
                "latency": latency_history_svg(history),
                "host": host,
                "peers": peers,
                "peer_names": self.reader.node_names(peers),
            }

        ctx = await asyncio.to_thread(build)
        return self.not_found(f"no node {key}") if ctx is None else self.page("node.html", **ctx)

    async def rounds_page(self, request: web.Request) -> web.Response:
        offset = query_int(request.query, "offset", default=0, lo=0, hi=MAX_OFFSET, clamp=True)

        def build() -> dict[str, Any]:
            rows = self.reader.rounds(PAGE_SIZE, offset)
            return {
                "rounds": spooled_status(rows, self.view.spooled_rounds()),
                "total": self.reader.count_rounds(),
                "offset": offset,
                "limit": PAGE_SIZE,
            }

        return self.page("rounds.html", **await asyncio.to_thread(build))

    async def round_page(self, request: web.Request) -> web.Response:
        rid = request.match_info["round_id"]

        def build() -> dict[str, Any] | None:
            r = self.reader.round(rid)
            if r is None:
                return None
            (r,) = spooled_status([r], self.view.spooled_rounds())
            rows = self.reader.round_nodes(rid)
            released = [int(x["released_ns"]) for x in rows if x["released_ns"] is not None]
            t0 = min(released) if released else 0
            for x in rows:
                for src, dst in (("released_ns", "rel_ms"), ("arrived_ns", "arr_ms")):
                    ns = x[src]
                    x[dst] = "–" if ns is None else f"{(int(ns) - t0) / 1e6:.3f} ms"
                budget = (x.get("extra") or {}).get("budget") or {}  # rounds.NodeTiming.budget
                x["release_index"] = budget.get("release_index")
                x["release_write_s"] = budget.get("release_write_s")
                x["processing_delay_s"] = budget.get("processing_delay_s")
            names = {x["node_key"]: x.get("name") for x in rows}
            return {
                "r": r,
                "summary": r["summary"] or {},
                "rows": rows,
                "timeline": round_timeline_svg(rows, lambda k: label(k, names.get(k))),
            }

        ctx = await asyncio.to_thread(build)
        return self.not_found(f"no round {rid}") if ctx is None else self.page("round.html", **ctx)

    async def flags_page(self, request: web.Request) -> web.Response:
        node = request.query.get("node")

        def build() -> dict[str, Any]:
            flags = self.all_flags()
            if node:
                flags = [f for f in flags if node in f.members]
            names = self.reader.node_names(sorted({m for f in flags for m in f.members}))
            return {
                "flags": flags,
                "reviews": {
                    str(k): v
                    for k, v in self.reviews().current(int(f.flag_id) for f in flags).items()
                },
                "node": node,
                "names": names,
                "has_table": bool(self.reader.flag_columns()),
            }

        return self.page("flags.html", **await asyncio.to_thread(build))

    def find_flag(self, flag_id: str) -> FlagView | None:
        return next((f for f in self.all_flags() if f.flag_id == flag_id), None)

    async def flag_page(self, request: web.Request) -> web.Response:
        fid = request.match_info["flag_id"]

        def build() -> dict[str, Any] | None:
            f = self.find_flag(fid)
            if f is None:
                return None
            members = list(f.members)
            matrix = self.reader.timing_matrix(members, f.round_ids)
            everyone = self.reader.timing_matrix(None, matrix["round_ids"])
            names = self.reader.node_names(members)
            labels = [label(k, names.get(k)) for k in members]
            hosts = self.view.node_hosts()
            edge_cols: list[str] = []
            for e in f.edges:
                edge_cols += [k for k in e if k not in edge_cols]
            history = self.reviews().history(int(f.flag_id))
            pair_plots = len(members) >= 2  # a 1x1 matrix or r = 1.00 says nothing
            return {
                "f": f,
                "reviews": history,
                "review": history[-1] if history else {"state": "open"},
                "pair_plots": pair_plots,
                "hosts": {m: hosts[m] for m in members if m in hosts},
                "matrix": matrix,
                "edge_cols": edge_cols,
                "edge_headers": EDGE_HEADERS,
                "edge_tests": EDGE_TESTS,
                "names": names,
                "loaded_plot": loaded_latency_svg(
                    members, matrix["loaded"], matrix["service_s"], lambda k: label(k, names.get(k))
                ),
                "coload_plot": ""
                if not pair_plots
                else heatmap_svg(
                    coload_matrix(members, matrix["loaded"]), labels, "co-loaded rounds"
                ),
                "corr_plot": ""
                if not pair_plots
                else heatmap_svg(
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
        return self.not_found(f"no flag {fid}") if ctx is None else self.page("flag.html", **ctx)

    async def flag_receipts(self, request: web.Request) -> web.Response:
        fid = request.match_info["flag_id"]

        def build() -> dict[str, Any] | None:
            f = self.find_flag(fid)
            if f is None:
                return None
            return {
                "flag_id": int(f.flag_id),  # an int, as the admin API and exports give it
                "members": list(f.members),
                "verify_with": "netcheck receipt verify (docs/protocol.md §7.3)",
                "receipts": self.reader.receipts(list(f.members), f.round_ids),
            }

        data = await asyncio.to_thread(build)
        if data is None:
            return self.not_found(f"no flag {fid}")
        return web.Response(
            text=json.dumps(data),
            content_type="application/json",
            headers={
                "Content-Disposition": f'attachment; filename="flag-{quote(fid)}-receipts.json"'
            },
        )

    async def exports_page(self, request: web.Request) -> web.Response:
        return self.page("exports.html", kinds=KINDS)

    # -- exports and metrics ------------------------------------------------------------

    async def export(self, request: web.Request) -> web.Response:
        kind, fmt = request.match_info["kind"], request.match_info["fmt"]
        if kind not in KINDS:
            raise web.HTTPNotFound(text=f"no export {kind!r}; one of {', '.join(KINDS)}")
        round_id = request.query.get("round_id") or None

        def build() -> str:
            stored_cols, stored = self.reader.export_rows(kind, round_id)
            keys = {str(r["node_key"]) for r in stored if "node_key" in r}
            keys |= {str(k) for r in stored for k in (r.get("node_keys") or [])}
            cols, types, rows = presented(
                kind, stored_cols, self.reader.column_types(kind), stored,
                self.reader.node_names(sorted(keys)),
            )  # fmt: skip
            if fmt == "csv":
                return to_csv(cols, rows)
            return to_json(kind, cols, types, rows)

        text = await asyncio.to_thread(build)
        ctype = "text/csv" if fmt == "csv" else "application/json"
        return web.Response(
            text=text,
            content_type=ctype,
            headers={"Content-Disposition": f'attachment; filename="{kind}.{fmt}"'},
        )

    async def metrics(self, request: web.Request) -> web.Response:
        body = await asyncio.to_thread(metrics_text, self.view)  # reads the database
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})
