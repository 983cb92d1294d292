"""Helpers for the node tests: a node config file on disk, and a node endpoint that
answers every upgrade with 503 (an overloaded proxy in front of the coordinator)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fake_coordinator_support import NODE_PATH, serving

from netcheck.keys import generate_key, public_key_text

#: A coordinator URL nothing listens on (port 1 refuses): the node retries in the background.
OFFLINE_URL = "ws://127.0.0.1:1/v1/ws"


def node_config(
    tmp_path: Path, url: str, coordinator_key: str | None = None, **fields: str | int
) -> Path:
    """Write ``tmp_path/node.toml``: profile ``cpu-tiny``, dialling ``url``, pinning
    ``coordinator_key`` (the text form; a fresh key nobody holds if None), with a fresh
    identity key in ``tmp_path/node.pem``. ``fields`` are more top-level settings (a str
    is written quoted, an int bare), in the order given. Returns the file's path."""
    generate_key(tmp_path / "node.pem")
    pinned = coordinator_key or public_key_text(Ed25519PrivateKey.generate())
    lines = [f'coordinator_url = "{url}"', f'coordinator_key = "{pinned}"',
             'identity_key = "node.pem"', 'profile = "cpu-tiny"']  # fmt: skip
    lines += [f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v}" for k, v in fields.items()]
    cfg = tmp_path / "node.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


@contextlib.asynccontextmanager
async def overloaded_endpoint() -> AsyncIterator[int]:
    """A server on 127.0.0.1 whose node endpoint (``/v1/ws``) answers every upgrade
    503; yields its port. Stopped on exit."""

    async def busy(request: web.Request) -> web.Response:
        return web.Response(status=503)

    app = web.Application()
    app.router.add_get(NODE_PATH, busy)
    async with serving(app) as port:
        yield port
