"""Client side of the coordinator's admin API, used by ``netcheck round run`` and friends."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import aiohttp
import click

from netcheck.config import CoordinatorConfig
from netcheck.errors import NetcheckError
from netcheck.redact import redact_url, redact_urls


class AdminError(NetcheckError):
    """The admin API refused the request or could not be reached."""


class AdminUnreachable(AdminError):
    """No coordinator answered at the configured address (exit status 4)."""


class AdminAuthError(AdminError):
    """The admin API refused the token (401) or the client's address (403) (exit 5)."""


class AdminConflict(AdminError):
    """The coordinator refused the request as things stand (409) (exit status 6)."""


class AdminStorageError(AdminError):
    """The coordinator's database failed (503: down, full, locked) (exit status 10)."""


class AdminNotFound(AdminError):
    """No such round, flag or node (404) (exit status 7)."""


class NothingChecked(NetcheckError):
    """Rounds ran but no node was checked: the canary pool is empty (exit status 8)."""


class NodesFailed(NetcheckError):
    """``--fail-on-failing``: a node got a failing verdict (exit status 9)."""


class RunStopped(NetcheckError):
    """A coordinator job ended without its judgement: cancelled by another client (the
    admin API's ``DELETE``), stopped by the coordinator's shutdown, or in a state that is
    not a completed run (exit status 11)."""


def _error_for(status: int) -> type[AdminError]:
    if status in (401, 403):
        return AdminAuthError
    if status == 409:
        return AdminConflict
    if status == 404:
        return AdminNotFound
    if status == 503:
        return AdminStorageError
    return AdminError


def admin_url(cfg: CoordinatorConfig, path: str) -> str:
    """URL of an admin route; a wildcard bind address is reached over loopback.

    IPv6 literals are bracketed (RFC 3986 §3.2.2); ``::`` is reached at ``[::1]``.
    """
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(cfg.host, cfg.host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{cfg.port}{path}"


async def admin_request(
    cfg: CoordinatorConfig,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    timeout_s: float = 600.0,
) -> Any:
    """Send one authenticated admin request and return the decoded JSON reply.

    Raises:
        AdminUnreachable: nothing answered at the address (connection refused, bad host,
            no answer within ``timeout_s``).
        AdminAuthError, AdminConflict, AdminNotFound, AdminStorageError: a 401/403, 409,
            404 or 503 reply.
        AdminError: any other error reply (with its text), or a reply that is not JSON.
    """
    headers = {"Authorization": f"Bearer {cfg.admin_token}"}
    url = admin_url(cfg, path)
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http,
            http.request(method, url, json=body, headers=headers) as resp,
        ):
            if resp.status >= 400:
                raise _error_for(resp.status)(
                    f"{method} {path}: HTTP {resp.status}: {await resp.text()}"
                )
            try:
                return await resp.json()
            except (ValueError, RecursionError) as exc:  # not JSON, or nested too deeply
                raise AdminError(
                    f"{method} {path}: the reply is not JSON ({type(exc).__name__}): is "
                    f"{redact_url(url)} a netcheck coordinator?"
                ) from None
    except aiohttp.ClientError as exc:
        raise AdminUnreachable(
            f"cannot reach the coordinator at {redact_url(url)}: {redact_urls(str(exc))}"
        ) from exc
    except TimeoutError as exc:  # aiohttp's total timeout: a bare, empty TimeoutError
        raise AdminUnreachable(
            f"the coordinator at {redact_url(url)} did not answer within {timeout_s:g} s"
        ) from exc


def admin_call(
    config_path: Path,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    timeout_s: float = 3600.0,
) -> Any:
    """Blocking :func:`admin_request` for CLI commands, addressed by a config file.

    The default timeout allows an hour: screening runs many rounds and confirmation.

    Raises:
        ConfigError: the coordinator config is invalid.
        AdminError: as :func:`admin_request`.
    """
    cfg = load_admin_config(config_path)
    try:
        return asyncio.run(admin_request(cfg, method, path, body, timeout_s=timeout_s))
    except AdminUnreachable as exc:
        raise with_start_hint(exc, config_path, cfg) from exc.__cause__


def invoked_as(argv0: str | None = None) -> str:
    """How to call netcheck again the way it was called, for the commands a message
    suggests: ``argv0`` (default ``sys.argv[0]``) when it is a ``netcheck`` script given
    with a folder (e.g. ``.venv/bin/netcheck``, as the README calls it: a bare
    ``netcheck`` is "command not found" without an activated venv), relative to the
    current folder when below it, shell-quoted; else plain ``netcheck`` (on PATH, or
    ``python -m netcheck``)."""
    arg = sys.argv[0] if argv0 is None else argv0
    path = Path(arg)
    if path.name != "netcheck" or len(path.parts) < 2:
        return "netcheck"
    if path.is_absolute():
        rel = Path(os.path.relpath(path))
        path = path if rel.parts[:1] == ("..",) else rel
    return shlex.quote(str(path))


def keygen_fix(exc: BaseException) -> str:
    """For a missing identity key (:class:`~netcheck.errors.KeyFileMissing`), the text
    to append to its message: ``; create it with: .venv/bin/netcheck keygen PATH`` (the
    command as this one was called, :func:`invoked_as`); ``""`` for any other error."""
    from netcheck.errors import KeyFileMissing

    if not isinstance(exc, KeyFileMissing):
        return ""
    return f"; create it with: {invoked_as()} keygen {shlex.quote(str(exc.path))}"


def with_start_hint(
    exc: AdminUnreachable, config_path: Path, cfg: CoordinatorConfig
) -> AdminUnreachable:
    """``exc`` with the command that starts the coordinator when nothing listens at its
    address (connection refused: it is not running, e.g. after ``netcheck demo``), so
    the message says what to do; ``exc`` itself for other failures (a timeout, a DNS
    error)."""
    cause = exc.__cause__
    if not isinstance(cause, aiohttp.ClientConnectorError) or not isinstance(
        cause.os_error, ConnectionRefusedError
    ):
        return exc
    serve = "gateway serve" if getattr(cfg, "gateway_id", None) else "coordinator serve"
    return AdminUnreachable(
        f"{exc}; nothing listens there: start it with `{invoked_as()} {serve} --config "
        f"{config_path}` (stored rounds and flags are read through it)"
    )


def load_admin_config(config_path: Path) -> CoordinatorConfig:
    """The coordinator (or gateway) config at ``config_path``, as :func:`admin_call` reads it.

    Raises:
        ConfigError: the config is invalid (naming file and field).
    """
    from netcheck.config import load_coordinator_config, load_gateway_config, read_toml

    gateway = "gateway_id" in read_toml(Path(config_path))  # a gateway of several
    return load_gateway_config(config_path) if gateway else load_coordinator_config(config_path)


def coordinator_label(config_path: Path) -> str:
    """``the coordinator at <admin URL> (<config path>)``: which coordinator a command
    asked, for lines that report an empty answer."""
    shown = redact_url(admin_url(load_admin_config(config_path), ""))
    return f"the coordinator at {shown} ({config_path})"


def node_endpoint(cfg: CoordinatorConfig) -> str:
    """The websocket URL a node's ``coordinator_url`` names for ``cfg``'s listen address
    (a wildcard bind address stands for this host's public name, which only the
    operator knows)."""
    from netcheck.protocol.handshake import ENDPOINT

    wildcard = cfg.host in ("0.0.0.0", "", "::")
    host = "<this host>" if wildcard else f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    return f"ws://{host}:{cfg.port}{ENDPOINT}"


#: ``--config`` option of the operator commands that talk to a running coordinator.
coordinator_config_option = click.option(
    "--config",
    "config_path",
    default="configs/coordinator.toml",
    show_default=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Coordinator config (for its address and admin token).",
)
