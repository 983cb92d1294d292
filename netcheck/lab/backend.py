"""DEMO ADVERSARY: a shared inference backend behind several node identities.

A "GPU farm" cheater runs one GPU and many node identities that forward their work to
it (:class:`~netcheck.lab.adversary.ProxyWorker`). This module is that one GPU: an
HTTP service on loopback running the real engine, with an **emulated** GPU service time
(:class:`~netcheck.lab.emulation.EmulatedGPU`) shared by every batch it serves, so that
k identities loaded together take ``T * (1 + beta * (k - 1))``.

Routes: ``GET /fingerprint`` (the engine fingerprint), ``POST /generate``
(``{"prompts": [...]}`` → ``{"outputs": [[...], ...]}``) and ``POST /probe``
(``{"challenge": "<64 hex>"}`` → ``{"answer": "<64 hex>"}``, the known-answer compute
probe of docs/protocol.md §5.9 run on this backend's device, so a proxy identity's
probe takes the extra network leg).

``delay_s`` (EMULATION, default 0) holds every request that long before serving it,
emulating a backend one network leg away (tests of the relay check).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from netcheck.errors import EngineError
from netcheck.node.workers import Worker, run_probe

log = logging.getLogger("netcheck.backend")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_backend_app(worker: Worker, *, delay_s: float = 0.0) -> web.Application:
    """aiohttp app serving ``worker`` to proxy identities; ``delay_s``: EMULATED extra
    latency added to every request (seconds, >= 0)."""
    if delay_s < 0:
        raise ValueError("delay_s must be >= 0")

    @web.middleware
    async def delay(request: web.Request, handler: Handler) -> web.StreamResponse:
        await asyncio.sleep(delay_s)
        return await handler(request)

    async def fingerprint(request: web.Request) -> web.Response:
        return web.json_response(worker.fingerprint)

    async def generate(request: web.Request) -> web.Response:
        body = await request.json()
        prompts = body.get("prompts") if isinstance(body, dict) else None
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise web.HTTPBadRequest(text="expected {'prompts': [str, ...]}")
        log.info("EMULATION backend: serving a batch of %d prompts", len(prompts))
        outputs = await worker.run(prompts)
        return web.json_response({"outputs": outputs})

    async def probe(request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("challenge") if isinstance(body, dict) else None
        try:
            challenge = bytes.fromhex(text) if isinstance(text, str) else b""
        except ValueError:
            challenge = b""
        if len(challenge) != 32:
            raise web.HTTPBadRequest(text="expected {'challenge': '<64 hex digits>'}")
        try:
            answer = await run_probe(worker, challenge)
        except EngineError as exc:
            raise web.HTTPInternalServerError(text=f"probe failed: {exc}") from exc
        return web.json_response({"answer": answer.hex()})

    app = web.Application(
        client_max_size=64 * 1024 * 1024, middlewares=[delay] if delay_s > 0 else []
    )
    app.router.add_get("/fingerprint", fingerprint)
    app.router.add_post("/generate", generate)
    app.router.add_post("/probe", probe)
    return app
