"""What the dashboard and the metrics see of the running coordinator: a narrow,
read-only view (never the coordinator object itself, so web/ imports nothing above it).

:mod:`netcheck.coordinator.assembly` passes a live implementation; tests and benchmarks
can pass any object with these members.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol

from netcheck.references.pool import PoolEntry
from netcheck.storage.store import Store


class CoordinatorView(Protocol):
    """Read-only view of a running coordinator."""

    @property
    def admin_token(self) -> str:
        """The token that opens the dashboard and the admin API."""
        ...

    @property
    def store(self) -> Store:
        """The coordinator's database (the dashboard only reads it)."""
        ...

    @property
    def handshake_failures(self) -> int:
        """Handshakes rejected or timed out since the coordinator started."""
        ...

    @property
    def sessions_refused(self) -> int:
        """Websocket upgrades refused over a session cap since the coordinator started
        (docs/protocol.md §3.3c)."""
        ...

    def connected_keys(self) -> Collection[str]:
        """Node keys (text form) with an open session now."""
        ...

    def connected_per_profile(self) -> Mapping[str, int]:
        """Open sessions per claimed profile, every configured profile included (0)."""
        ...

    def reference_pool(self) -> list[PoolEntry]:
        """The canary pool per (profile, fingerprint) with the connected nodes drawing
        from it (:mod:`netcheck.references.pool`). Reads the database: blocking."""
        ...

    def node_hosts(self) -> Mapping[str, str]:
        """Declared co-hosting: node key -> the host its operator declared it shares
        with other identities (``node_hosts`` in the coordinator config)."""
        ...

    def spooled_rounds(self) -> Mapping[str, Mapping[str, Any]]:
        """Round id -> its spool entry, for rounds whose results wait in the local spool
        for the database (docs/spool.md); shown as ``spooled``. Reads a file: blocking."""
        ...

    def extra_collectors(self) -> list[Any]:
        """Prometheus collectors beyond the coordinator's own (a gateway's gauges)."""
        ...

    async def held_by(self) -> Mapping[str, Mapping[str, Any]] | None:
        """Several gateways: ``node_key -> session row`` (``gateway_id`` included) of
        every node connected to any live gateway; one process: None."""
        ...
