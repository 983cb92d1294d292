"""Analyst dashboard, exports and Prometheus metrics served by the coordinator.

- :func:`add_web_routes` (:func:`netcheck.coordinator.assembly.make_app` calls it)
  registers every route on a read-only :class:`~netcheck.web.view.CoordinatorView`;
  see :mod:`netcheck.web.routes` and docs/dashboard.md.
- :func:`observe_round` records a finished round in the metrics (a round-finished hook).

Importing this package is cheap: the dashboard (matplotlib, Jinja2) loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from netcheck.web.metrics import observe_round

if TYPE_CHECKING:
    from aiohttp import web

    from netcheck.web.view import CoordinatorView

__all__ = ["add_web_routes", "observe_round"]


def add_web_routes(app: web.Application, coord: CoordinatorView, **kwargs: Any) -> None:
    """Register the dashboard, exports and ``/metrics`` on ``app`` (see :mod:`.routes`)."""
    from netcheck.web.routes import add_web_routes as add

    add(app, coord, **kwargs)
