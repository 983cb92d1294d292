"""Test helpers: in-process gateways on loopback sharing one PostgreSQL schema."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import GatewayConfig, Profile
from netcheck.coordinator.assembly import make_runner
from netcheck.coordinator.rxstamps import KernelStampSite
from netcheck.gateway.gateway import Gateway
from netcheck.lab.testing import RunningCoordinator
from netcheck.storage import Store


@contextlib.asynccontextmanager
async def running_gateway(
    tmp_path: Path,
    database: str,
    gateway_id: str,
    profiles: Sequence[Profile],
    identity: Ed25519PrivateKey,
    *,
    wall_ns: Callable[[], int] | None = None,
    **settings: Any,
) -> AsyncIterator[RunningCoordinator]:
    """A gateway serving on a free 127.0.0.1 port (``rc.coord`` is the :class:`Gateway`);
    stops it, its node tasks and its control connection on exit. ``settings`` override
    :class:`GatewayConfig` fields (e.g. ``join_timeout_s``)."""
    cfg = GatewayConfig(
        host="127.0.0.1", port=0, identity_key=tmp_path / "unused.pem", open_enrollment=True,
        database=database, admin_token=secrets.token_urlsafe(24),
        profiles=[p.name for p in profiles], gateway_id=gateway_id, **settings,
    )  # fmt: skip
    store = Store(database)
    extra = {} if wall_ns is None else {"wall_ns": wall_ns}
    gw = Gateway(cfg, identity, {p.name: p for p in profiles}, store, **extra)
    runner = await make_runner(gw)
    site = KernelStampSite(runner, "127.0.0.1", 0)  # as `gateway serve` does
    await site.start()
    rc = RunningCoordinator(gw, runner, site.port, identity)
    await gw.start_cluster(rc.url)
    try:
        yield rc
    finally:
        import asyncio

        for task in rc.nodes:
            task.cancel()
        await asyncio.gather(*rc.nodes, return_exceptions=True)
        await runner.cleanup()
        await gw.stop_cluster()
        store.close()
