"""Process entry points of ``netcheck node run`` and the demo's shared backend."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from aiohttp import web

from netcheck.config import NodeConfig, Profile, load_node_config, load_profile
from netcheck.engines import load_engine
from netcheck.errors import ConfigError
from netcheck.keys import load_private_key, parse_public_key
from netcheck.node.client import NodeClient
from netcheck.node.emulation import EmulatedGPU
from netcheck.node.workers import EmulatedWorker, EngineWorker, Worker

log = logging.getLogger("netcheck.node")


async def build_worker(
    profile: Profile,
    emulate_batch_time: float | None,
    adversary: str | None = None,
    backend: str | None = None,
) -> Worker:
    """The worker a node runs: the real engine, optionally wrapped in emulation.

    ``adversary`` selects a DEMO ADVERSARY (:mod:`netcheck.node.adversary`).

    Raises:
        ConfigError: ``--adversary proxy`` without ``--backend``.
        EngineError: the engine failed to load.
    """
    from netcheck.node import adversary as adv

    worker: Worker
    if adversary is None:
        worker = EngineWorker(await asyncio.to_thread(load_engine, profile))
    elif adversary == "wrong-dtype":
        worker = await asyncio.to_thread(adv.wrong_dtype_worker, profile)
    elif adversary == "made-up":
        engine = await asyncio.to_thread(load_engine, profile)
        worker = adv.MadeUpWorker(engine.fingerprint, profile.max_new_tokens)
    elif adversary == "proxy":
        if not backend:
            raise ConfigError("--adversary proxy needs --backend URL")
        # The shared backend already emulates its own (shared) GPU time.
        return await adv.ProxyWorker.connect(backend)
    else:
        raise ConfigError(f"unknown adversary {adversary!r}")
    if adversary:
        log.warning("DEMO ADVERSARY %s: this node cheats on purpose", adversary)
    if emulate_batch_time is not None:
        log.warning("EMULATION: GPU service time emulated as %.2f s per batch", emulate_batch_time)
        worker = EmulatedWorker(worker, EmulatedGPU(emulate_batch_time))
    return worker


async def run_node(
    config_path: Path,
    emulate_batch_time: float | None = None,
    adversary: str | None = None,
    backend: str | None = None,
) -> None:
    """Load config, key and engine, then serve rounds until SIGINT/SIGTERM."""
    cfg: NodeConfig = load_node_config(config_path)
    identity = load_private_key(cfg.identity_key)
    coordinator_key = parse_public_key(cfg.coordinator_key)
    profile = load_profile(cfg.profile)
    worker = await build_worker(profile, emulate_batch_time, adversary, backend)
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


async def run_backend(profile_name: str, port: int, batch_time_s: float, beta: float) -> None:
    """DEMO ADVERSARY: serve one engine + one emulated GPU to several proxy identities."""
    from netcheck.node.backend import make_backend_app

    profile = load_profile(profile_name)
    engine = await asyncio.to_thread(load_engine, profile)
    log.warning(
        "DEMO ADVERSARY shared backend; EMULATION: one GPU, %.2f s per batch, beta %.2f",
        batch_time_s,
        beta,
    )
    worker = EmulatedWorker(EngineWorker(engine), EmulatedGPU(batch_time_s, beta))
    runner = web.AppRunner(make_backend_app(worker), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
