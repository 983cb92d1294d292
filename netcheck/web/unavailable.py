"""A failing database on the operator surfaces (admin API, dashboard, exports,
``/metrics``): a 503 whose text names the failure, not a 500 with a traceback.

:func:`storage_errors` is registered inside each surface's access check (token,
loopback), so only a caller allowed to see the surface learns of the failure; the node
endpoints (``/v1/ws``, ``/v1/doctor``) are left out by ``prefixes``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from netcheck.errors import StorageError

log = logging.getLogger("netcheck.web")

#: The start of a 503's text: the database failed (the CLI exits 10 on it).
DATABASE_UNAVAILABLE = "database unavailable"


def storage_errors(prefixes: Sequence[str]) -> Middleware:
    """Middleware: a :class:`~netcheck.errors.StorageError` out of a handler of a path
    starting with one of ``prefixes`` (PostgreSQL down, SQLite disk full or locked past
    the retry budget) is a 503 ``database unavailable: <the failure>`` and one WARNING
    line; other paths and other errors pass unchanged."""
    wanted = tuple(prefixes)

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not request.path.startswith(wanted):
            return await handler(request)
        try:
            return await handler(request)
        except StorageError as exc:
            log.warning("%s %s: %s", request.method, request.path, exc)
            raise web.HTTPServiceUnavailable(text=f"{DATABASE_UNAVAILABLE}: {exc}") from None

    return middleware
