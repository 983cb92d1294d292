"""Operator API of the coordinator (JSON over HTTP, bearer token, loopback only).

Routes:

- ``GET  /admin/status``          — connected nodes per profile.
- ``GET  /admin/nodes``           — connected sessions and every known node.
- ``POST /admin/rounds``          — run a round now; body ``{"profile": NAME}`` (optional).
- ``GET  /admin/rounds``          — recent rounds.
- ``GET  /admin/rounds/{round_id}`` — verdicts of one round (404 for an unknown round).
- ``POST /admin/screening``       — run screening rounds, the analysis and confirmation;
  body ``{"rounds": N, "profile": NAME}`` (both optional; N defaults to 16). Returns
  the rounds, the detector summary, the confirmations and the flags raised.
- ``GET  /admin/flags``           — flags, newest first, without evidence; query
  parameters ``kind``, ``status``, ``node``, ``limit`` (1..10000, default 200) filter them.
- ``GET  /admin/flags/{flag_id}`` — one flag with its evidence.

Every request needs ``Authorization: Bearer <admin_token>`` from the coordinator config,
and must come from a loopback address (the server also binds to loopback by default).

Bodies and query parameters are checked by :mod:`netcheck.web.inputs`: a body that is
not a JSON object, a ``profile`` that is neither absent, ``null`` (the first profile)
nor a non-empty string, or a non-integer or out-of-range number is a 400 naming the
field. An unknown profile, or no node to validate, is a 409.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from netcheck.coordinator.capacity_gate import capacity_context
from netcheck.errors import NetcheckError
from netcheck.storage.flags import jsonable
from netcheck.storage.reader import Reader
from netcheck.web.inputs import json_object, optional_name, parse_int, query_int

if TYPE_CHECKING:
    from netcheck.coordinator.server import Coordinator

log = logging.getLogger("netcheck.admin")

DEFAULT_SCREENING_ROUNDS = 16
MAX_SCREENING_ROUNDS = 1024


def _is_loopback(remote: str | None) -> bool:
    if not remote:
        return False
    try:
        return ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


#: Where :func:`admin_app` is mounted (``app.add_subapp(ADMIN_PREFIX, admin_app(coord))``).
ADMIN_PREFIX = "/admin"


def admin_app(coord: Coordinator) -> web.Application:
    """The admin API as an aiohttp sub-application (routes relative to
    :data:`ADMIN_PREFIX`) with its authentication middleware."""
    app = web.Application()
    reader = Reader(coord.store)

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.path.startswith("/admin/"):
            return await handler(request)
        if not _is_loopback(request.remote):
            log.warning("admin request from non-loopback address %s refused", request.remote)
            raise web.HTTPForbidden(text="admin API is loopback-only")
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip()
        if not header.startswith("Bearer ") or not hmac.compare_digest(
            token.encode(), coord.config.admin_token.encode()
        ):
            raise web.HTTPUnauthorized(text="missing or wrong admin token")
        return await handler(request)

    async def status(request: web.Request) -> web.Response:
        per_profile: dict[str, int] = {}
        for s in coord.sessions.values():
            per_profile[s.claim.profile] = per_profile.get(s.claim.profile, 0) + 1
        return web.json_response(
            {"connected": len(coord.sessions), "per_profile": per_profile,
             "profiles": sorted(coord.profiles), "handshake_failures": coord.handshake_failures}
        )  # fmt: skip

    async def nodes(request: web.Request) -> web.Response:
        connected = [
            {"node_key": s.node_key, "name": coord.config.node_names.get(s.node_key, ""),
             "profile": s.claim.profile, "peer": s.peer,
             "fingerprint_id": s.fingerprint_id, "rtt_s": s.rtt_s,
             "software": s.claim.software, "connected_at": s.connected_at}
            for s in coord.sessions.values()
        ]  # fmt: skip
        body: dict[str, Any] = {"connected": connected, "known": coord.store.list_nodes()}
        held = await coord.held_by()
        if held is not None:  # several gateways: which gateway holds each node
            for c in connected:
                c["gateway"] = held.get(str(c["node_key"]), {}).get("gateway_id")
            body["cluster"] = list(held.values())
        return web.json_response(jsonable(body))

    def default_profile() -> str:
        return next(iter(coord.profiles), coord.config.profiles[0])

    async def start_round(request: web.Request) -> web.Response:
        body = await json_object(request)
        profile = optional_name(body, "profile") or default_profile()
        try:
            report = await coord.start_round(profile)
        except NetcheckError as exc:
            raise web.HTTPConflict(text=str(exc)) from None
        body = report.as_dict()
        for v in body["verdicts"]:  # operator-chosen display names (config: node_names)
            v["name"] = coord.config.node_names.get(v["node_key"], "")
        return web.json_response(body)

    async def list_rounds(request: web.Request) -> web.Response:
        return web.json_response({"rounds": coord.store.list_rounds()})

    async def round_detail(request: web.Request) -> web.Response:
        rid = request.match_info["round_id"]
        if reader.round(rid) is None:
            raise web.HTTPNotFound(text=f"no round {rid!r}")
        return web.json_response({"round_id": rid, "verdicts": coord.store.round_verdicts(rid)})

    async def screening(request: web.Request) -> web.Response:
        body = await json_object(request)
        profile = optional_name(body, "profile") or default_profile()
        n = body.get("rounds", DEFAULT_SCREENING_ROUNDS)
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_SCREENING_ROUNDS:
            raise web.HTTPBadRequest(text=f"rounds must be an integer in 0..{MAX_SCREENING_ROUNDS}")
        context = capacity_context(coord, profile, body)  # issue 10; HTTPConflict if refused
        try:
            report = await coord.screening.run(profile, n, context=context)
        except NetcheckError as exc:
            raise web.HTTPConflict(text=str(exc)) from None
        return web.json_response(report)

    async def list_flags(request: web.Request) -> web.Response:
        q = request.query
        limit = query_int(q, "limit", default=200, lo=1, hi=10_000)
        rows = coord.screening.flags.list_flags(
            kind=q.get("kind"), status=q.get("status"), node_key=q.get("node"), limit=limit
        )
        return web.json_response(jsonable({"flags": rows}))

    async def flag_detail(request: web.Request) -> web.Response:
        flag_id = parse_int(request.match_info["flag_id"])
        if flag_id is None:
            raise web.HTTPBadRequest(text="flag id must be an integer")
        if not 0 <= flag_id < 2**63:
            raise web.HTTPNotFound(text=f"no flag {flag_id}")
        flag = coord.screening.flags.get_flag(flag_id)
        if flag is None:
            raise web.HTTPNotFound(text=f"no flag {flag_id}")
        return web.json_response(jsonable(flag))

    app.middlewares.append(auth)
    app.router.add_get("/status", status)
    app.router.add_get("/nodes", nodes)
    app.router.add_post("/rounds", start_round)
    app.router.add_get("/rounds", list_rounds)
    app.router.add_get("/rounds/{round_id}", round_detail)
    app.router.add_post("/screening", screening)
    app.router.add_get("/flags", list_flags)
    app.router.add_get("/flags/{flag_id}", flag_detail)
    return app
