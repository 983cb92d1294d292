"""The coordinator's aiohttp application, assembled in one place.

- ``GET /v1/ws``: node sessions (:meth:`Coordinator.handle_ws`, docs/protocol.md §2-§4).
- ``/admin/...``: the operator API, a sub-application (:func:`netcheck.coordinator.admin.admin_app`).
- ``/dashboard...``, ``/export/...``, ``/metrics``: the dashboard, exports and metrics
  (:func:`netcheck.web.add_web_routes`), registered on the root application because they
  share no single path prefix; they see the coordinator only through a read-only
  :class:`~netcheck.web.view.CoordinatorView` (:class:`LiveView`).
- the detection timer (:meth:`Screening.attach`) and the shutdown that closes sessions.

Every request first passes :func:`netcheck.web.inputs.refuse_control_chars`, then :func:`forwarded_caller`
(behind a trusted proxy, the caller that loopback-only surfaces check is the client the
proxy names), then :func:`netcheck.web.bodies.bound_request_bodies` (the whole body
within ``request_header_timeout_s``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Middleware

from netcheck.capacity import unsafe_profiles
from netcheck.coordinator.admin import ADMIN_PREFIX, admin_app
from netcheck.coordinator.doctor_api import add_doctor_route
from netcheck.coordinator.limits import client_address
from netcheck.coordinator.pool import live_pool
from netcheck.coordinator.server import WS_PATH, Coordinator
from netcheck.references.pool import PoolEntry
from netcheck.storage.store import Store
from netcheck.web import add_web_routes
from netcheck.web.bodies import bound_request_bodies
from netcheck.web.inputs import refuse_control_chars

#: Largest request body (admin JSON bodies, dashboard forms), bytes.
CLIENT_MAX_SIZE = 1024 * 1024


class LiveView:
    """:class:`~netcheck.web.view.CoordinatorView` of a live coordinator (read at each
    call, so a changed config or session table shows at once)."""

    def __init__(self, coord: Coordinator) -> None:
        self._coord = coord

    @property
    def admin_token(self) -> str:
        return self._coord.config.admin_token

    @property
    def store(self) -> Store:
        return self._coord.store

    @property
    def handshake_failures(self) -> int:
        return self._coord.handshake_failures

    @property
    def sessions_refused(self) -> int:
        return self._coord.slots.refused

    def connected_keys(self) -> Collection[str]:
        return self._coord.sessions.keys()

    def reference_pool(self) -> list[PoolEntry]:
        return live_pool(self._coord.store, self._coord.profiles, self._coord.sessions)

    def connected_per_profile(self) -> Mapping[str, int]:
        per_profile = dict.fromkeys(self._coord.profiles, 0)
        for s in list(self._coord.sessions.values()):  # a snapshot: may run in a thread
            per_profile[s.claim.profile] = per_profile.get(s.claim.profile, 0) + 1
        return per_profile

    def node_hosts(self) -> Mapping[str, str]:
        return self._coord.config.node_hosts

    def spooled_rounds(self) -> Mapping[str, Mapping[str, Any]]:
        return self._coord.recorder.pending()

    def extra_collectors(self) -> list[Any]:
        return self._coord.extra_collectors()

    async def held_by(self) -> Mapping[str, Mapping[str, Any]] | None:
        return await self._coord.held_by()


def forwarded_caller(coord: Coordinator) -> Middleware:
    """Middleware: a request from a trusted proxy (``trusted_proxies``) continues with
    ``remote`` set to the client the proxy names in ``X-Forwarded-For``
    (:func:`~netcheck.coordinator.limits.client_address`, the rule of handshakes).

    The admin API, dashboard, exports and ``/metrics`` refuse callers that are not on
    loopback; behind a proxy on the same host every request came from 127.0.0.1, so an
    internet client through the proxy passed for a local one. The node endpoint
    resolves its own peer in :meth:`Coordinator.handle_ws` and is left as it is.
    """

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        trusted = coord.trusted_proxies  # read per request: tests and reloads change it
        if trusted and request.path != WS_PATH:
            forwarded = request.headers.getall("X-Forwarded-For", [])
            client = client_address(request.remote, forwarded, trusted)
            if client != request.remote:
                request = request.clone(remote=client)
        return await handler(request)

    return middleware


def make_app(coord: Coordinator) -> web.Application:
    """The aiohttp application of ``coord``: websocket endpoint, admin API, dashboard."""
    # The body deadline reuses request_header_timeout_s: the whole request is bounded.
    bodies = bound_request_bodies(coord.config.request_header_timeout_s)
    app = web.Application(
        client_max_size=CLIENT_MAX_SIZE,
        # forwarded_caller before bodies: a request cannot be cloned once its body is read
        middlewares=[refuse_control_chars, forwarded_caller(coord), bodies],
    )
    app.router.add_get(WS_PATH, coord.handle_ws)
    app.add_subapp(ADMIN_PREFIX, admin_app(coord))
    coord.screening.attach(app)
    # issue 10: every dashboard page states which profiles cannot tell two identities
    # apart; a browser user's way of calling netcheck is not known: no program named
    warnings = [s.message for s in unsafe_profiles(list(coord.profiles.values()), prog=None)]
    add_web_routes(app, LiveView(coord), capacity_warnings=warnings)
    add_doctor_route(app, coord)  # POST /v1/doctor: signed node self-check, no session
    app.on_startup.append(coord.on_startup)
    app.on_shutdown.append(coord.on_shutdown)
    app.on_cleanup.append(coord.on_cleanup)
    return app


class QuietClientErrors(logging.Filter):
    """On ``aiohttp.server``: a request aiohttp's parser refused (400, the client's fault:
    bytes that are not UTF-8 in the request line, a bad header) is one WARNING line
    naming the client and the reason, not an ERROR with a traceback per request that
    anyone who reaches the port can send. Other records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not (isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 0) < 500):
            return True
        try:  # a filter that raises would fail the request (aiohttp answers 500)
            said = record.getMessage()  # "Error handling request from <client>"
            reason = ((exc.message or "").strip().splitlines() or [type(exc).__name__])[0]
        except Exception:  # noqa: BLE001 - keep the record as it was
            return True
        record.msg = "bad HTTP request refused (%d): %s [%s]"
        record.args = (exc.code, reason, said)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info = record.exc_text = None
        return True


_QUIET = QuietClientErrors()


async def make_runner(coord: Coordinator) -> web.AppRunner:
    """A set-up :class:`aiohttp.web.AppRunner` for :func:`make_app`; add a site.

    aiohttp's ``keepalive_timeout`` is set to ``request_header_timeout_s``: a
    connection waiting for a complete HTTP request (the first one, from accept, or
    the next one on a keep-alive connection) is closed after that long, which stops
    "slowloris" clients that trickle headers. Its default (3630 s in
    ``RequestHandler``) would let one client hold a socket for an hour. Websocket
    sessions are inside a request and are not affected. Requests the HTTP parser
    refuses are logged as one warning each (:class:`QuietClientErrors`).
    """
    server_log = logging.getLogger("aiohttp.server")
    if _QUIET not in server_log.filters:
        server_log.addFilter(_QUIET)
    runner = web.AppRunner(
        make_app(coord), access_log=None, keepalive_timeout=coord.config.request_header_timeout_s
    )
    await runner.setup()
    return runner
