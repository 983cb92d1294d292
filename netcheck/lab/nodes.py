"""LAB node processes: a node's worker with labelled emulation or a demo adversary, and
the demo's shared adversary backend (``netcheck node backend``).

The real node (:mod:`netcheck.node.app`) never imports this module; the CLI passes
:func:`worker_factory` to :func:`netcheck.node.app.run_node` only when
``--emulate-batch-time`` or the hidden ``--adversary`` option is given.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal

from aiohttp import web

from netcheck.config import Profile, load_profile
from netcheck.engines import load_engine
from netcheck.errors import ConfigError
from netcheck.lab import adversary as adv
from netcheck.lab.backend import make_backend_app
from netcheck.lab.emulation import EmulatedGPU, EmulatedWorker
from netcheck.node.app import WorkerFactory, engine_worker
from netcheck.node.workers import EngineWorker, Worker

log = logging.getLogger("netcheck.node")


async def build_worker(
    profile: Profile,
    emulate_batch_time: float | None,
    adversary: str | None = None,
    backend: str | None = None,
) -> Worker:
    """The worker a lab node runs: the real engine or a DEMO ADVERSARY
    (:mod:`netcheck.lab.adversary`), optionally wrapped in EMULATION of GPU service time.

    Raises:
        ConfigError: ``--adversary proxy`` without ``--backend``, or an unknown adversary.
        EngineError: the engine failed to load.
    """
    worker: Worker
    if adversary is None:
        worker = await engine_worker(profile)
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


def worker_factory(
    emulate_batch_time: float | None, adversary: str | None = None, backend: str | None = None
) -> WorkerFactory:
    """:func:`build_worker` with its lab options bound, for :func:`run_node`'s injection
    point."""
    return functools.partial(
        build_worker, emulate_batch_time=emulate_batch_time, adversary=adversary, backend=backend
    )


async def run_backend(profile_name: str, port: int, batch_time_s: float, beta: float) -> None:
    """DEMO ADVERSARY: serve one engine + one emulated GPU to several proxy identities."""
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
