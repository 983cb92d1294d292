"""Process entry point of ``netcheck coordinator serve``: wire config, keys, store, server."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.analysis.slowness import floor_problem
from netcheck.capacity import unsafe_profiles
from netcheck.config import CoordinatorConfig, Profile, load_coordinator_config
from netcheck.coordinator.assembly import make_runner
from netcheck.coordinator.rxstamps import KernelStampSite
from netcheck.coordinator.server import WS_PATH, Coordinator
from netcheck.coordinator.session_types import message_cap_problem
from netcheck.errors import ConfigError, DatabaseURLError
from netcheck.keys import load_private_key, public_key_text
from netcheck.storage import Store

log = logging.getLogger("netcheck.coordinator")


def build_coordinator(config_path: Path) -> Coordinator:
    """Load everything a coordinator needs from its config file.

    Raises:
        ConfigError, KeyFileError, StorageError: with the file or field at fault (an
            unusable database URL is a ConfigError naming ``database``).
    """
    cfg = load_coordinator_config(config_path)
    return Coordinator(cfg, *coordinator_parts(cfg, config_path))


def coordinator_parts(
    cfg: CoordinatorConfig, config_path: Path
) -> tuple[Ed25519PrivateKey, dict[str, Profile], Store]:
    """The identity key, the accepted profiles (resolved as the config says: its folder's
    ``profiles/`` or ``profiles_dir``, then the installed ones) and the store of ``cfg``
    (loaded from ``config_path``); shared by the coordinator and the gateway.

    Raises:
        ConfigError: a bad key or profile file, or a ``database`` URL that cannot be used
            (unsupported backend, driver not installed: ``<file>: database: ...``).
        KeyFileError: the identity key file.
        StorageError: the database is unreachable or broken (exit 10).
    """
    identity = load_private_key(cfg.identity_key)
    profiles = {p.name: p for p in (cfg.load_profile(name) for name in cfg.profiles)}
    for p in profiles.values():  # else an honest result over the cap is refused: `missing`
        if problem := message_cap_problem(cfg.max_message_bytes, p):
            raise ConfigError(f"{config_path}: {problem}")
    try:
        store = Store(cfg.database)
    except DatabaseURLError as exc:
        raise ConfigError(f"{config_path}: database: {exc}") from None
    return identity, profiles, store


async def serve(config_path: Path, ready: asyncio.Event | None = None) -> None:
    """Serve until SIGINT/SIGTERM, then close every session with ``shutdown``."""
    coord = build_coordinator(config_path)
    runner = await make_runner(coord)
    # kernel receive stamps on every node connection where available (logged which)
    site = KernelStampSite(runner, coord.config.host, coord.config.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"{config_path}: cannot listen on {coord.config.host}:{coord.config.port} "
            f"({exc.strerror}); change `port` or stop the other process"
        ) from None
    # Only now, with the port ours, can no other coordinator be serving this database's
    # rounds (one that were would hold the port): a second `serve` started by mistake
    # fails above without touching a live round.
    # The spool is replayed first, so a round whose results waited there is not aborted.
    # Then the after-round checks of the rounds it replayed, before any new round.
    aborted = await coord.recover()
    if aborted:
        log.warning("marked %d round(s) left unfinished by a previous run as aborted", aborted)
    log.info(
        "coordinator %s listening on ws://%s:%d%s (profiles: %s; %s)",
        public_key_text(coord.identity),
        coord.config.host,
        coord.config.port,
        WS_PATH,
        ", ".join(coord.profiles),
        "open enrollment"
        if coord.config.open_enrollment
        else f"{len(coord.allowed)} allowed nodes",
    )
    log.info(
        "dashboard: http://%s:%d/dashboard (log in with the admin token)",
        coord.config.host, coord.config.port,
    )  # fmt: skip
    # issue 10: said at every start; the calibration runs on a trusted card, maybe
    # another host, so its command is named without a program (as the capacity 409 does)
    for status in unsafe_profiles(list(coord.profiles.values()), prog=None):
        log.warning("%s", status.message)
    for p in coord.profiles.values():  # a floor that turns the slowness stage off, unsaid
        floor = coord.config.slowness_floor
        if problem := floor_problem(floor, p.name, p.deadline.t_ref_s, p.result_timeout_s):
            log.warning("%s", problem)
    if coord.config.open_enrollment and coord.config.allowed_nodes:
        log.warning("open_enrollment = true: allowed_nodes is ignored, any key may join")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()
    log.info("coordinator shutting down")
    await runner.cleanup()
    coord.store.close()
