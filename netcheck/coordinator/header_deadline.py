"""Close connections that do not send a complete HTTP request in time ("slowloris").

aiohttp (3.14) has no deadline for the request line and headers: a client that opens a
TCP connection and sends ``GET /ws HTTP/1.1\\r\\n`` one byte a minute holds a socket and
a handler task forever. Before the websocket upgrade no netcheck code runs yet, so the
handshake deadline (``handshake_timeout_s``, docs/protocol.md section 2) cannot help.

:class:`HeaderDeadline` gives every new connection ``timeout_s`` seconds to deliver one
complete request: a middleware marks the connection's transport when aiohttp hands a
parsed request to the application, and a timer started at ``connection_made`` closes any
transport not marked by then. Keep-alive connections that already sent a request are
left to aiohttp's own ``keepalive_timeout``.

This is the same defence as nginx's ``client_header_timeout`` (default 60 s); a reverse
proxy in front of the coordinator remains the recommended deployment (README).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger("netcheck.coordinator")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HeaderDeadline:
    """Per-connection deadline for the first complete HTTP request.

    Args:
        timeout_s: seconds from TCP accept to a complete request line and headers.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.closed = 0  # connections closed for missing the deadline (for tests, metrics)
        self._served: weakref.WeakSet[asyncio.BaseTransport] = weakref.WeakSet()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Mark the request's connection as having sent a complete request."""
        if request.transport is not None:
            self._served.add(request.transport)
        return await handler(request)

    def install(self, server: web.Server) -> None:
        """Start the deadline timer on every connection ``server`` accepts from now on.

        ``server`` is ``AppRunner.server`` after ``setup()``; its public
        ``connection_made(handler, transport)`` hook is wrapped on this instance only.
        """
        made = server.connection_made
        loop = asyncio.get_running_loop()

        def connection_made(handler: web.RequestHandler, transport: asyncio.Transport) -> None:
            made(handler, transport)
            loop.call_later(self.timeout_s, self._check, transport)

        server.connection_made = connection_made  # type: ignore[method-assign]

    def _check(self, transport: asyncio.Transport) -> None:
        if transport.is_closing() or transport in self._served:
            return
        self.closed += 1
        peer = transport.get_extra_info("peername")
        log.info(
            "closing connection from %s: no complete HTTP request in %.0f s", peer, self.timeout_s
        )
        transport.close()
