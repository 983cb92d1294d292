"""The admin client (every operator command that reads through the coordinator) facing
a coordinator that does not answer in time, or a reply that is not JSON. Before: a
bare, empty TimeoutError (aiohttp's total timeout; `screen run` polls with 30 s and
died with a traceback while its job ran on) and a JSONDecodeError, both tracebacks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

from netcheck.admin_client import AdminError, AdminUnreachable, admin_request, load_admin_config
from netcheck.keys import generate_key


@asynccontextmanager
async def server(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_get("/admin/nodes", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def config(tmp_path: Path, port: int) -> Path:
    generate_key(tmp_path / "c.pem")
    path = tmp_path / "coordinator.toml"
    path.write_text(
        f'identity_key = "c.pem"\nopen_enrollment = true\nprofiles = ["cpu-tiny"]\n'
        f'admin_token = "0123456789abcdef0123"\nport = {port}\n'
    )
    return path


async def test_no_answer_in_time_is_admin_unreachable(tmp_path: Path) -> None:
    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(10)
        return web.Response()

    async with server(hang) as port:
        cfg = load_admin_config(config(tmp_path, port))
        with pytest.raises(AdminUnreachable, match="did not answer within 0.5 s"):
            await admin_request(cfg, "GET", "/admin/nodes", timeout_s=0.5)


@pytest.mark.parametrize("body", [b"{bad", b"[" * 100_000 + b"]" * 100_000])
async def test_a_reply_that_is_not_json_is_an_admin_error(tmp_path: Path, body: bytes) -> None:
    async def garbage(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    async with server(garbage) as port:
        cfg = load_admin_config(config(tmp_path, port))
        with pytest.raises(AdminError, match="the reply is not JSON"):
            await admin_request(cfg, "GET", "/admin/nodes", timeout_s=5)
