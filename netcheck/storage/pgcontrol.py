"""A gateway's control connection to PostgreSQL: advisory locks and ``LISTEN``.

One asyncio psycopg connection in autocommit mode per gateway. It holds the session-level
advisory locks (presence, and leadership when won), which PostgreSQL releases the moment
the connection ends, and receives the deployment's notifications. If the connection
breaks (e.g. the server restarts), :meth:`ControlConnection.run` reconnects with backoff,
re-acquires the presence lock and listens again; leadership is lost and must be re-won.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from netcheck.storage.cluster_tables import Deployment

log = logging.getLogger("netcheck.gateway")

RECONNECT_MIN_S = 0.2
RECONNECT_MAX_S = 5.0


class ControlConnection:
    """Presence lock, leader lock and notifications of one gateway.

    Args:
        deployment: lock namespace, channel and connection string.
        gateway_id: this gateway's id (its presence lock key is derived from it).
        on_event: called with every notification payload (a dict) on this loop.
        want_leader: when True, :meth:`run` tries to win the leader lock every
            ``leader_poll_s`` while not leader.
    """

    def __init__(
        self,
        deployment: Deployment,
        gateway_id: str,
        on_event: Callable[[dict[str, Any]], None],
        *,
        want_leader: bool = True,
        leader_poll_s: float = 1.0,
    ) -> None:
        self.deployment = deployment
        self.gateway_id = gateway_id
        self.on_event = on_event
        self.want_leader = want_leader
        self.leader_poll_s = leader_poll_s
        self.is_leader = False
        self.connected = asyncio.Event()
        self.on_leadership: Callable[[bool], None] = lambda _won: None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock_conn: psycopg.AsyncConnection[Any] | None = None

    async def _connect(self) -> None:
        ns = self.deployment.namespace
        lock_conn = await psycopg.AsyncConnection.connect(self.deployment.conninfo, autocommit=True)
        got = await (
            await lock_conn.execute(
                "SELECT pg_try_advisory_lock(%s, %s)",
                (ns, self.deployment.gateway_lock(self.gateway_id)),
            )
        ).fetchone()
        if not got or not got[0]:
            await lock_conn.close()
            raise RuntimeError(
                f"gateway id {self.gateway_id!r} is already live in this deployment "
                "(another process holds its presence lock)"
            )
        conn = await psycopg.AsyncConnection.connect(self.deployment.conninfo, autocommit=True)
        await conn.execute(f'LISTEN "{self.deployment.channel}"')
        self._conn, self._lock_conn = conn, lock_conn

    async def start(self) -> None:
        """Connect, take the presence lock and listen (raises if the id is live)."""
        await self._connect()
        self.connected.set()

    async def try_lead(self) -> bool:
        """Try to win the leader lock now; returns whether this gateway leads."""
        if self.is_leader or self._lock_conn is None:
            return self.is_leader
        cur = await self._lock_conn.execute(
            "SELECT pg_try_advisory_lock(%s, %s)",
            (self.deployment.namespace, Deployment.LEADER_LOCK),
        )
        row = await cur.fetchone()
        if row and row[0]:
            self.is_leader = True
            log.info("gateway %s is now the round leader", self.gateway_id)
            self.on_leadership(True)
        return self.is_leader

    async def resign(self) -> None:
        """Give up leadership (keeps presence)."""
        if self.is_leader and self._lock_conn is not None:
            with contextlib.suppress(psycopg.Error):
                await self._lock_conn.execute(
                    "SELECT pg_advisory_unlock(%s, %s)",
                    (self.deployment.namespace, Deployment.LEADER_LOCK),
                )
        self.is_leader = False

    async def _listen(self) -> None:
        assert self._conn is not None
        while True:
            async for n in self._conn.notifies(timeout=self.leader_poll_s):
                try:
                    event = json.loads(n.payload)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    self.on_event(event)
            if self.want_leader and not self.is_leader:
                await self.try_lead()
            elif self._lock_conn is not None:
                await self._lock_conn.execute("SELECT 1")  # notice a dead server early

    async def run(self) -> None:
        """Listen forever; reconnect with backoff when the connection breaks."""
        delay = RECONNECT_MIN_S
        while True:
            try:
                if self._conn is None:
                    await self._connect()
                    self.connected.set()
                    log.info("gateway %s: control connection (re)established", self.gateway_id)
                    self.on_event({"e": "reconnected"})
                    delay = RECONNECT_MIN_S
                await self._listen()
            except (psycopg.Error, OSError, RuntimeError) as exc:
                self.connected.clear()
                if self.is_leader:
                    log.warning("gateway %s lost leadership: %s", self.gateway_id, exc)
                    self.is_leader = False
                    self.on_leadership(False)
                else:
                    log.warning("gateway %s control connection lost: %s", self.gateway_id, exc)
                await self.close()
                await asyncio.sleep(delay)
                delay = min(RECONNECT_MAX_S, delay * 2)

    async def close(self) -> None:
        """Close both connections (their locks are released by the server)."""
        for conn in (self._conn, self._lock_conn):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
        self._conn = self._lock_conn = None
