"""Whole-request bounds: a request body must arrive completely within a deadline.

aiohttp bounds the wait for request *headers* (``keepalive_timeout``, set to
``request_header_timeout_s``) but not the body: a client that trickles a body into
``POST /dashboard/login`` one byte at a time held a handler and a socket forever, and
each disconnect logged a 30-line traceback. This middleware reads the body (at most
``client_max_size`` bytes, as aiohttp enforces) under a deadline before any handler
runs; aiohttp keeps the bytes, so ``request.post()`` and ``request.json()`` in the
handler read them from memory. A refused request gets one log line, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

log = logging.getLogger("netcheck.web")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def bound_request_bodies(timeout_s: float) -> Middleware:
    """A middleware that reads each request body completely within ``timeout_s``
    seconds (counted from the handler's start, i.e. after the headers) or answers 408
    and closes the connection; a client that disconnects mid-body is logged in one line.
    """

    @web.middleware
    async def bound_body(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.body_exists:
            return await handler(request)
        where = f"{request.method} {request.path} from {request.remote or '?'}"
        try:
            await asyncio.wait_for(request.read(), timeout_s)
        except TimeoutError:
            log.warning("request %s refused: body not complete in %g s (408)", where, timeout_s)
            # Connection: close, so the unread rest of the body is never parsed.
            return web.Response(
                status=408, text="request body too slow\n", headers={"Connection": "close"}
            )
        except (ConnectionError, EOFError, asyncio.IncompleteReadError) as exc:
            log.warning("request %s dropped: client gone mid-body (%s)", where, type(exc).__name__)
            raise web.HTTPBadRequest(text="incomplete body") from None
        return await handler(request)

    return bound_body
