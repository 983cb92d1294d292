"""Process entry point of ``netcheck node run``."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from netcheck import __version__
from netcheck.config import NodeConfig, Profile, load_node_config
from netcheck.engines import load_engine
from netcheck.engines.fingerprint import fingerprint_id
from netcheck.keys import load_private_key, parse_public_key, public_key_text
from netcheck.node.client import NodeClient
from netcheck.node.preflight import (
    CoordinatorRefused,
    CoordinatorUnreachable,
    probe_coordinator,
)
from netcheck.node.verdicts import default_log_path
from netcheck.node.warmup import assess, warm_up
from netcheck.node.workers import EngineWorker, Worker
from netcheck.redact import redact_url

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
    """Load config and key, ask the coordinator (:func:`probe_coordinator`, before the
    engine: a wrong URL or key is logged as an error within seconds, not after a
    model load that can take minutes), load the worker (``make_worker``, the real engine
    by default), then serve rounds until SIGINT/SIGTERM. Refusals are not authenticated
    (docs/protocol.md §8.1), so they do not stop the node: it keeps retrying.

    Raises:
        ConfigError: a bad config, key or profile.
        EngineError: the worker failed to load.
        NodeFatalError: the coordinator refused this node inside the authenticated
            session.
    """
    cfg: NodeConfig = load_node_config(config_path)
    identity = load_private_key(cfg.identity_key)
    coordinator_key = parse_public_key(cfg.coordinator_key)
    profile = cfg.node_profile()  # the config's device, when set, picks the card
    label = cfg.name or config_path.stem
    log.info(
        "%s: starting netcheck %s node: key %s, profile %s, coordinator %s",
        label, __version__, public_key_text(identity), profile.name, redact_url(cfg.coordinator_url),
    )  # fmt: skip
    try:  # a wrong URL or key must not wait for the engine (minutes on a GPU)
        await probe_coordinator(cfg)
        log.info(
            "%s: coordinator at %s holds the pinned key and admits this node",
            label, redact_url(cfg.coordinator_url),
        )  # fmt: skip
    except CoordinatorRefused as exc:  # not authenticated (§8.1): said now, then retried
        log.error(
            "%s: %s. Found before loading the engine; it loads anyway and the node keeps "
            "retrying (a refusal is not authenticated): fix the config and restart, or "
            "stop it with Ctrl-C", label, exc,
        )  # fmt: skip
    except CoordinatorUnreachable as exc:
        log.warning(
            "%s: %s; loading the engine anyway, the node keeps retrying", label, exc
        )  # fmt: skip
    log.info(
        "%s: loading engine %s %s (%s on %s); this can take a while",
        label, profile.engine, profile.model, profile.dtype, profile.device,
    )  # fmt: skip
    t0 = time.monotonic()
    worker = await make_worker(profile)
    fp = dict(worker.fingerprint)
    log.info(
        "%s: engine ready in %.1f s: fingerprint %s (%s)",
        label, time.monotonic() - t0, fingerprint_id(fp)[:12],
        ", ".join(f"{k}={v}" for k, v in sorted(fp.items())),
    )  # fmt: skip
    if isinstance(worker, EngineWorker) and cfg.warmup_batches:  # the real engine only
        result = assess(await warm_up(worker, profile, cfg.warmup_batches), profile)
        log.log(result.level, "%s: %s", label, result.message)
    client = NodeClient(
        cfg.coordinator_url,
        identity,
        coordinator_key,
        profile.name,
        worker,
        label=label,
        verdict_log=default_log_path(config_path),
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
