"""DEMO ADVERSARY: a shared inference backend behind several node identities.

A "GPU farm" cheater runs one GPU and many node identities that forward their work to
it (:class:`~netcheck.node.adversary.ProxyWorker`). This module is that one GPU: an
HTTP service on loopback running the real engine, with an **emulated** GPU service time
(:class:`~netcheck.node.emulation.EmulatedGPU`) shared by every batch it serves, so that
k identities loaded together take ``T * (1 + beta * (k - 1))``.

Routes: ``GET /fingerprint`` (the engine fingerprint) and ``POST /generate``
(``{"prompts": [...]}`` → ``{"outputs": [[...], ...]}``).
"""

from __future__ import annotations

import logging

from aiohttp import web

from netcheck.node.workers import Worker

log = logging.getLogger("netcheck.backend")


def make_backend_app(worker: Worker) -> web.Application:
    """aiohttp app serving ``worker`` to proxy identities."""

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

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/fingerprint", fingerprint)
    app.router.add_post("/generate", generate)
    return app
