"""A reverse proxy may serve the node endpoint under another path and host (TLS
termination, path routing): the handshake binds the protocol's endpoint name `/v1/ws`
and the pinned coordinator key, not the URL the node dialled (docs/protocol.md §2.1)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from aiohttp import WSMsgType, web

from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import running_coordinator, small_profile

PROFILE = small_profile("proxied")
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "55" * 32}


async def _pump(src: object, dst: object) -> None:
    async for msg in src:  # type: ignore[attr-defined]
        if msg.type is WSMsgType.BINARY:
            await dst.send_bytes(msg.data)  # type: ignore[attr-defined]
        else:
            break
    await dst.close()  # type: ignore[attr-defined]


def rewriting_proxy(upstream: str) -> web.Application:
    """Serves ``/netcheck/node`` and forwards each websocket message to ``upstream``
    (``/v1/ws``), as a path-routing reverse proxy does."""

    async def handler(request: web.Request) -> web.WebSocketResponse:
        down = web.WebSocketResponse()
        await down.prepare(request)
        async with aiohttp.ClientSession() as http, http.ws_connect(upstream) as up:
            await asyncio.gather(_pump(down, up), _pump(up, down))
        return down

    app = web.Application()
    app.router.add_get("/netcheck/node", handler)
    return app


async def test_node_joins_through_a_path_rewriting_proxy(tmp_path: Path) -> None:
    """Dialling ``ws://localhost:P/netcheck/node`` (proxied to ``/v1/ws``) opens a session
    (was BAD_SIGNATURE: the node bound ``/netcheck/node`` into the transcript)."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        runner = web.AppRunner(rewriting_proxy(rc.url))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            client = rc.node(MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name)
            client.url = f"ws://localhost:{port}/netcheck/node"
            rc.start(client)
            await rc.wait_connected(1, timeout_s=10)
            (session,) = rc.coord.sessions.values()
            rtt = await session.measure_rtt(1, timeout_s=5.0)  # frames flow both ways
            assert rtt is not None
        finally:
            for task in rc.nodes:
                task.cancel()
            await asyncio.gather(*rc.nodes, return_exceptions=True)
            await runner.cleanup()
