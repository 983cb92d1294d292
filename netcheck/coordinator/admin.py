"""Operator API of the coordinator (JSON over HTTP, bearer token, loopback only).

Routes:

- ``GET  /admin/status``          — connected nodes per profile.
- ``GET  /admin/nodes``           — connected sessions and every known node.
- ``POST /admin/rounds``          — run a round now; body ``{"profile": NAME}`` (optional).
- ``GET  /admin/rounds``          — recent rounds.
- ``GET  /admin/rounds/{round_id}`` — verdicts of one round.

Every request needs ``Authorization: Bearer <admin_token>`` from the coordinator config,
and must come from a loopback address (the server also binds to loopback by default).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from netcheck.coordinator.rounds import run_round
from netcheck.errors import NetcheckError

if TYPE_CHECKING:
    from netcheck.coordinator.server import Coordinator

log = logging.getLogger("netcheck.admin")


def _is_loopback(remote: str | None) -> bool:
    if not remote:
        return False
    try:
        return ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


def add_admin_routes(app: web.Application, coord: Coordinator) -> None:
    """Register the admin routes and their authentication middleware on ``app``."""

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
            {"node_key": s.node_key, "profile": s.claim.profile, "peer": s.peer,
             "fingerprint_id": s.fingerprint_id, "rtt_s": s.rtt_s,
             "software": s.claim.software, "connected_at": s.connected_at}
            for s in coord.sessions.values()
        ]  # fmt: skip
        return web.json_response({"connected": connected, "known": coord.store.list_nodes()})

    async def start_round(request: web.Request) -> web.Response:
        body: dict[str, Any] = {}
        if request.can_read_body:
            try:
                body = await request.json()
            except ValueError:
                raise web.HTTPBadRequest(text="body must be JSON") from None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text="body must be a JSON object")
        profile = body.get("profile") or coord.config.profiles[0]
        try:
            report = await run_round(coord, str(profile))
        except NetcheckError as exc:
            raise web.HTTPConflict(text=str(exc)) from None
        return web.json_response(report.as_dict())

    async def list_rounds(request: web.Request) -> web.Response:
        return web.json_response({"rounds": coord.store.list_rounds()})

    async def round_detail(request: web.Request) -> web.Response:
        rid = request.match_info["round_id"]
        return web.json_response({"round_id": rid, "verdicts": coord.store.round_verdicts(rid)})

    app.middlewares.append(auth)
    app.router.add_get("/admin/status", status)
    app.router.add_get("/admin/nodes", nodes)
    app.router.add_post("/admin/rounds", start_round)
    app.router.add_get("/admin/rounds", list_rounds)
    app.router.add_get("/admin/rounds/{round_id}", round_detail)
