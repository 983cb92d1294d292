"""The dashboard's canary-pool banner: rounds left per fingerprint on every page.

A middleware (:func:`pool_middleware`) reads the pool in a worker thread before a
dashboard page is built and leaves it in a context variable; ``page()`` passes it to
the base template, which shows one line per pool that connected nodes draw from (every
pool when none is connected). Pools that are ``low`` or ``empty`` are drawn as a
warning with the command that builds more.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from netcheck.references.pool import PoolEntry

if TYPE_CHECKING:
    from netcheck.web.view import CoordinatorView

#: Pools shown at most (the shortest first).
MAX_SHOWN = 6

POOL: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "netcheck_dashboard_pool", default=None
)


def banner_rows(entries: list[PoolEntry]) -> list[dict[str, Any]]:
    """The pools to show, shortest first: those with connected nodes, else all."""
    live = [e for e in entries if e.nodes] or entries
    live.sort(key=lambda e: (e.rounds_left, e.profile, e.fingerprint_id))
    return [e.as_dict() for e in live[:MAX_SHOWN]]


def pool_middleware(coord: CoordinatorView) -> Any:
    """An aiohttp middleware that loads the pool banner for dashboard GET pages."""

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method != "GET" or not request.path.startswith("/dashboard/"):
            return await handler(request)
        if request.path == "/dashboard/login" or request.path.endswith(".json"):
            return await handler(request)
        rows = banner_rows(await asyncio.to_thread(coord.reference_pool))
        token = POOL.set(rows)
        try:
            return await handler(request)
        finally:
            POOL.reset(token)

    return middleware
