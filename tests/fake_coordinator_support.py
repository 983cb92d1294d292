"""A fake coordinator for node tests: an aiohttp server on loopback that plays the
coordinator's side of the node endpoint from a script.

``node_endpoint(script)`` hands each upgraded websocket to ``script(ws)`` as it is (a
forged close, a forged or text ``welcome``, silence); ``fake_coordinator(script)``
first completes the real handshake with a key of its own and then runs
``script(ws, session)`` on the coordinator's sans-I/O session. ``dial`` makes the node
that connects to it, ``read`` takes the node's next message.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import WSMsgType, web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from netcheck.node.client import NodeClient
from netcheck.protocol.handshake import CoordinatorHandshake
from netcheck.protocol.messages import Message
from netcheck.protocol.session import Session
from netcheck.protocol.states import Role

NODE_PATH = "/v1/ws"
RawScript = Callable[[web.WebSocketResponse], Awaitable[None]]
Script = Callable[[web.WebSocketResponse, Session], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(
    app: web.Application, shutdown_timeout_s: float | None = None
) -> AsyncIterator[int]:
    """Serve ``app`` on 127.0.0.1 at a free port; yields the port. ``shutdown_timeout_s``
    bounds the wait for open requests at the end (aiohttp's default, 60 s, if None)."""
    kwargs: dict[str, Any] = {}
    if shutdown_timeout_s is not None:
        kwargs["shutdown_timeout"] = shutdown_timeout_s
    runner = web.AppRunner(app, **kwargs)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def node_endpoint(
    script: RawScript, shutdown_timeout_s: float | None = None
) -> AsyncIterator[str]:
    """A server on the node endpoint that accepts every upgrade and runs ``script(ws)``
    on it, from ``hello`` on; yields the ws:// URL to dial."""

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await script(ws)
        return ws

    app = web.Application()
    app.router.add_get(NODE_PATH, handler)
    async with serving(app, shutdown_timeout_s) as port:
        yield f"ws://127.0.0.1:{port}{NODE_PATH}"


@contextlib.asynccontextmanager
async def fake_coordinator(script: Script) -> AsyncIterator[tuple[str, Ed25519PrivateKey]]:
    """A server on the node endpoint that completes the real handshake with its own key
    (accepting any node), then runs ``script(ws, session)``; yields (url, its key)."""
    identity = Ed25519PrivateKey.generate()

    async def after_handshake(ws: web.WebSocketResponse) -> None:
        hs = CoordinatorHandshake(identity, lambda key: True)
        await ws.send_bytes(hs.receive_hello((await ws.receive()).data))
        accepted = hs.receive_auth((await ws.receive()).data)
        await script(ws, Session(Role.COORDINATOR, accepted.transport))

    async with node_endpoint(after_handshake) as url:
        yield url, identity


async def read(ws: web.WebSocketResponse, session: Session) -> Message:
    """The node's next message (through the coordinator's state table)."""
    frame = await ws.receive(timeout=10)
    assert frame.type is WSMsgType.BINARY, frame
    return session.receive_frame(frame.data)


def dial(
    url: str, worker: Any, profile: str, coordinator_key: Ed25519PublicKey | None = None
) -> NodeClient:
    """A node with a fresh identity that dials ``url`` claiming ``profile``; it pins
    ``coordinator_key`` (a fresh, unrelated key if None)."""
    pinned = coordinator_key or Ed25519PrivateKey.generate().public_key()
    return NodeClient(url, Ed25519PrivateKey.generate(), pinned, profile, worker)
