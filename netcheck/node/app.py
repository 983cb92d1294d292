"""Process entry point of ``netcheck node run``."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

from netcheck.config import NodeConfig, Profile, load_node_config, load_profile
from netcheck.engines import load_engine
from netcheck.keys import load_private_key, parse_public_key
from netcheck.node.client import NodeClient
from netcheck.node.workers import EngineWorker, Worker

log = logging.getLogger("netcheck.node")


#: Builds the worker a node runs for a profile. The default runs the real engine; the
#: CLI injects a labelled lab factory (emulation, demo adversaries) only when asked to.
WorkerFactory = Callable[[Profile], Awaitable[Worker]]


async def engine_worker(profile: Profile) -> Worker:
    """The real worker: the profile's engine, loaded in a thread.

    Raises:
        EngineError: the engine failed to load.
    """
    return EngineWorker(await asyncio.to_thread(load_engine, profile))


async def run_node(config_path: Path, make_worker: WorkerFactory = engine_worker) -> None:
    """Load config, key and worker (``make_worker``, the real engine by default), then
    serve rounds until SIGINT/SIGTERM.

    Raises:
        ConfigError: a bad config, key or profile.
        EngineError: the worker failed to load.
        NodeFatalError: the coordinator refused this node for good.
    """
    cfg: NodeConfig = load_node_config(config_path)
    identity = load_private_key(cfg.identity_key)
    coordinator_key = parse_public_key(cfg.coordinator_key)
    profile = load_profile(cfg.profile)
    worker = await make_worker(profile)
    client = NodeClient(
        cfg.coordinator_url,
        identity,
        coordinator_key,
        profile.name,
        worker,
        label=cfg.name or config_path.stem,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = asyncio.create_task(client.run_forever(stop))
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if runner in done:
        stopper.cancel()
        runner.result()  # re-raise NodeFatalError
    else:
        runner.cancel()
