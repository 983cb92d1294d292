"""``netcheck coordinator check``: what a start would need, checked without starting.

The coordinator's analogue of the node's ``netcheck doctor`` (:mod:`netcheck.node.doctor`,
whose :class:`~netcheck.node.doctor.Check` it returns). In order:

1. the config loads (:func:`netcheck.config.load_coordinator_config`: its errors name
   the file and field; a gateway config, with ``gateway_id``, loads as one);
2. the listen address parses (``host`` an IP address or a host name that resolves) and
   can be bound now (a socket bound with ``SO_REUSEADDR``, as aiohttp binds, then
   closed: a port in use, one below 1024 without the privilege, or a host that is not
   an address of this machine fails);
3. the identity key loads (present, Ed25519 PEM, mode 0600);
4. the screening schedule secret is readable, long enough and mode 0600, or would be
   created at the first start (:func:`netcheck.keys.check_secret`);
5. the spool's folder is writable (round results wait there when the database is down);
6. every profile named loads (with the capacity warning a start logs, and the warning
   that `slowness_floor` is too high for the profile's slowness stage ever to fire);
7. the database could be opened (:func:`netcheck.storage.probe.probe_database`: a SQLite
   file and its folder writable, or a PostgreSQL server reachable; nothing created);
8. each profile's reference pool holds unspent canaries
   (:func:`netcheck.references.pool.pool_status`), or the command that builds them.

Nothing is created or changed: no key, secret, database file or table (the listen
check's socket is closed at once).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import shlex
import socket
import sys
from pathlib import Path

import click

from netcheck.admin_client import admin_url, invoked_as, keygen_fix, load_admin_config
from netcheck.analysis.schedule import MIN_SECRET_BYTES
from netcheck.analysis.slowness import floor_problem
from netcheck.capacity import capacity_status
from netcheck.config import CoordinatorConfig, Profile
from netcheck.coordinator.session_types import message_cap_problem
from netcheck.errors import NetcheckError
from netcheck.keys import check_secret, load_private_key, public_key_text, unwritable_folder
from netcheck.node.doctor import Check
from netcheck.protocol.handshake import ENDPOINT
from netcheck.references.pool import build_command, pool_status, with_config
from netcheck.storage.probe import probe_database

_HOSTNAME = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?$")


def listen_check(cfg: CoordinatorConfig) -> Check:
    """``host`` and ``port`` as a start would bind them (no socket is opened)."""
    host = cfg.host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOSTNAME.match(host):
            return Check("listen address", False, f"host {host!r} is not an IP address or a "
                         'host name: set host = "0.0.0.0" (every interface) or an address')  # fmt: skip
        try:
            socket.getaddrinfo(host, cfg.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            return Check("listen address", False, f"host {host!r} does not resolve ({exc}): "
                         "use an IP address")  # fmt: skip
    shown = f"[{host}]" if ":" in host else host
    detail = (
        f"ws://{shown}:{cfg.port}{ENDPOINT} for nodes, {admin_url(cfg, '/admin')} for operators"
    )
    if cfg.port == 0:
        return Check("listen address", True, detail + "; port 0 takes a random free port, "
                     "which nodes cannot be told in advance: set port", warning=True)  # fmt: skip
    problem = bind_problem(host, cfg.port)
    if problem:
        return Check("listen address", False, f"{host}:{cfg.port} {problem}")
    return Check("listen address", True, detail)


def bind_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound now (with its fix), or None when it can: a
    socket bound with ``SO_REUSEADDR`` (as aiohttp's server binds on POSIX), closed at
    once."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"does not resolve ({exc})"
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except PermissionError:
            return ("cannot be bound without privileges (ports below 1024): use a port "
                    "above 1023, behind a TLS proxy")  # fmt: skip
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (f"is in use (a coordinator already running? `ss -ltnp "
                        f"'sport = :{port}'` shows what holds it): stop it or set port")  # fmt: skip
            if exc.errno == errno.EADDRNOTAVAIL:
                return "is not an address of this machine: set host to one of its addresses"
            return f"cannot be bound ({exc.strerror or exc})"
    return None


def identity_check(cfg: CoordinatorConfig) -> Check:
    """The identity key loads as a start loads it."""
    path = cfg.identity_key
    try:
        key = load_private_key(path)
    except NetcheckError as exc:
        return Check("identity key", False, f"{exc}{keygen_fix(exc)}")
    return Check("identity key", True, f"{path} ({public_key_text(key)}, for node configs)")


def _failing(name: str, exc: NetcheckError) -> Check:
    return Check(name, False, str(exc))


def secret_check(cfg: CoordinatorConfig) -> Check:
    """The screening schedule secret (:func:`netcheck.keys.check_secret`)."""
    what = "screening schedule secret"
    try:
        return Check(what, True, check_secret(cfg.schedule_secret_path, what, MIN_SECRET_BYTES))
    except NetcheckError as exc:
        return _failing(what, exc)


def spool_check(cfg: CoordinatorConfig) -> Check:
    """The spool file (or its folder) is writable."""
    path = cfg.spool_path
    if path.exists():
        if not path.is_file() or not os.access(path, os.W_OK) or unwritable_folder(path.parent):
            return Check("spool", False, f"{path}: not a writable file in a writable folder")
        return Check("spool", True, f"{path} (exists: a start replays what it holds)")
    blocked = unwritable_folder(path.parent)
    if blocked is not None:
        return Check("spool", False, f"{path}: {blocked} is not a writable folder; make it writable or "
                     "set spool_file")  # fmt: skip
    return Check("spool", True, f"{path} (created when the database is down at a round's end)")


def profile_checks(cfg: CoordinatorConfig) -> tuple[list[Check], dict[str, Profile]]:
    """One check per profile named in the config, and the profiles that loaded."""
    checks, profiles = [], {}
    for name in cfg.profiles:
        try:
            profile = cfg.load_profile(name)
        except NetcheckError as exc:
            checks.append(_failing(f"profile {name}", exc))
            continue
        profiles[profile.name] = profile
        if problem := message_cap_problem(cfg.max_message_bytes, profile):
            checks.append(Check(f"profile {name}", False, problem))
            continue
        detail = f"engine {profile.engine}, model {profile.model}, B = {profile.batch_size}"
        status = capacity_status(profile, invoked_as())
        if not status.safe:
            problem = status.message.removeprefix(f"profile {profile.name}: ")  # named once
            checks.append(Check(f"profile {name}", True, f"{detail}; {problem}", True))
        else:
            checks.append(Check(f"profile {name}", True, detail))
        floor = cfg.slowness_floor  # a warning, as at start: the operator may mean it
        if off := floor_problem(floor, profile.name, profile.deadline.t_ref_s,
                                profile.result_timeout_s):  # fmt: skip
            checks.append(Check("slowness_floor", True, off, warning=True))
    return checks, profiles


def pool_checks(
    config_path: Path, profiles: dict[str, Profile], rows: list[dict[str, object]]
) -> list[Check]:
    """One check per profile: its unspent canaries per fingerprint, or the build command."""
    entries = pool_status(rows, profiles)  # type: ignore[arg-type]
    checks = []
    for name in profiles:
        mine = [e for e in entries if e.profile == name]
        build = with_config(build_command(name), config_path, invoked_as())
        if not mine:
            checks.append(Check(f"references {name}", False, f"no references stored for "
                                f"{name}: nodes would be unchecked; build them with: {build}"))  # fmt: skip
            continue
        parts = [f"{e.unspent} unspent of {e.total} (fingerprint {e.fingerprint_id[:12]}, "
                 f"{e.rounds_left} rounds left for one node)" for e in mine]  # fmt: skip
        detail = "; ".join(parts)
        if all(e.state == "empty" for e in mine):
            checks.append(Check(f"references {name}", False, f"{detail}: every canary is spent; "
                                f"build more with: {build}"))  # fmt: skip
        elif any(e.state != "ok" for e in mine):
            checks.append(Check(f"references {name}", True, f"{detail}; build more with: {build}",
                                warning=True))  # fmt: skip
        else:
            checks.append(Check(f"references {name}", True, detail))
    return checks


def run_checks(config_path: Path) -> list[Check]:
    """Every check of the module docstring, in order; creates and changes nothing.

    A config that does not load is the one check returned; a database that cannot be
    opened leaves the reference pools unchecked (said in its check).
    """
    try:
        cfg = load_admin_config(config_path)
    except NetcheckError as exc:
        return [Check("config", False, str(exc))]
    checks = [Check("config", True, f"{config_path} loads"), listen_check(cfg),
              identity_check(cfg), secret_check(cfg), spool_check(cfg)]  # fmt: skip
    profile_results, profiles = profile_checks(cfg)
    checks += profile_results
    try:
        probe = probe_database(cfg.database)
    except NetcheckError as exc:
        checks.append(Check("database", False, f"{exc} (reference pools not checked)"))
        return checks
    checks.append(Check("database", True, probe.detail))
    return checks + pool_checks(config_path, profiles, probe.pool)


@click.command("check")
@click.option(
    "--config",
    "config_path",
    default="configs/coordinator.toml",
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Coordinator config file (TOML) to check; relative paths in it resolve against "
    "its folder.",
)
def coordinator_check(config_path: Path) -> None:
    """Check what `coordinator serve` needs, without starting it: the config, listen
    address, identity key, schedule secret, spool, profiles, database and each
    profile's reference pool. One line per check (ok, warn or FAIL with the fix);
    exits 1 if a check fails. Creates nothing."""
    checks = run_checks(config_path)
    for c in checks:
        label, colour = ("FAIL", "red") if not c.ok else ("warn", "yellow") if c.warning else ("ok", "green")  # fmt: skip
        detail = c.detail.replace("\n", "; ")  # one line per check
        click.echo(click.style(f"{label:<4}", fg=colour) + f"  {c.name}: {detail}")
    failed = [c for c in checks if not c.ok]
    if failed:
        click.echo(f"{len(failed)} of {len(checks)} checks failed")
        sys.exit(1)
    serve = f"{invoked_as()} coordinator serve --config {shlex.quote(str(config_path))}"
    warned = sum(1 for c in checks if c.warning)
    note = f", {warned} of them with a warning (warn above)" if warned else ""
    click.echo(f"all {len(checks)} checks passed{note}; start it with: {serve}")
