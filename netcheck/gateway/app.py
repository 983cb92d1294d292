"""Process entry point of ``netcheck gateway serve``: config, keys, store, gateway."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from netcheck.config import load_gateway_config
from netcheck.coordinator.app import coordinator_parts
from netcheck.coordinator.assembly import make_runner
from netcheck.coordinator.rxstamps import KernelStampSite
from netcheck.coordinator.server import WS_PATH
from netcheck.errors import ConfigError
from netcheck.gateway.gateway import Gateway
from netcheck.keys import public_key_text
from netcheck.redact import redact_url

log = logging.getLogger("netcheck.gateway")


def build_gateway(config_path: Path) -> Gateway:
    """Load everything a gateway needs from its config file.

    Raises:
        ConfigError, KeyFileError, StorageError: with the file or field at fault.
    """
    cfg = load_gateway_config(config_path)
    return Gateway(cfg, *coordinator_parts(cfg, config_path))


async def serve(config_path: Path, ready: asyncio.Event | None = None) -> None:
    """Serve until SIGINT/SIGTERM. Unlike ``coordinator serve`` it does not abort
    unfinished rounds at start: other gateways may be running one; the leader closes
    rounds whose leader was lost (docs/gateways.md)."""
    gw = build_gateway(config_path)
    cfg = gw.gconfig
    runner = await make_runner(gw)
    site = KernelStampSite(runner, cfg.host, cfg.port)  # kernel arrival stamps (logged)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"{config_path}: cannot listen on {cfg.host}:{cfg.port} ({exc.strerror})"
        ) from None
    url = f"ws://{cfg.host}:{cfg.port}{WS_PATH}"
    try:
        await gw.start_cluster(url)
    except RuntimeError as exc:
        await runner.cleanup()
        raise ConfigError(f"{config_path}: gateway_id: {exc}") from None
    log.info("gateway %s (coordinator key %s) listening on %s; %s", cfg.gateway_id,
             public_key_text(gw.identity), redact_url(url),
             "round leader" if gw.control.is_leader else "follower")  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()
    log.info("gateway %s shutting down", cfg.gateway_id)
    await runner.cleanup()
    await gw.stop_cluster()
    gw.store.close()
