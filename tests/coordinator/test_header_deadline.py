"""The request header deadline: slowloris connections are closed, real clients are not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from netcheck.load import HashWorker
from netcheck.testing import running_coordinator, small_profile

PROFILE = small_profile("hdr")


async def _raw(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.split("//")[1].split("/")[0].split(":")
    return await asyncio.open_connection(host, int(port))


async def test_incomplete_request_is_closed_after_the_deadline(tmp_path: Path) -> None:
    async with running_coordinator(tmp_path, [PROFILE], request_header_timeout_s=0.5) as rc:
        idle_r, idle_w = await _raw(rc.url)  # sends nothing at all
        slow_r, slow_w = await _raw(rc.url)
        slow_w.write(b"GET /ws HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        await slow_w.drain()
        # EOF (b"") once the coordinator closes each; without the deadline both hang.
        assert await asyncio.wait_for(idle_r.read(), 10.0) == b""
        assert await asyncio.wait_for(slow_r.read(), 10.0) == b""
        assert rc.coord.header_deadline.closed == 2
        idle_w.close()
        slow_w.close()


async def test_sessions_and_keepalive_http_outlive_the_deadline(tmp_path: Path) -> None:
    """A node session and an HTTP keep-alive connection that sent a complete request in
    time are not closed when the deadline passes."""
    async with running_coordinator(tmp_path, [PROFILE], request_header_timeout_s=0.3) as rc:
        client = rc.node(HashWorker(PROFILE.max_new_tokens), PROFILE.name)
        task = rc.start(client)
        await rc.wait_connected(1, timeout_s=10.0)
        page = f"http://127.0.0.1:{rc.port}/dashboard/login"
        opened = 0

        async def on_open(*_: object) -> None:
            nonlocal opened
            opened += 1

        trace = aiohttp.TraceConfig()
        trace.on_connection_create_end.append(on_open)
        async with aiohttp.ClientSession(trace_configs=[trace]) as http:
            for _ in range(2):
                async with http.get(page) as resp:
                    await resp.read()
                    assert resp.status == 200
                await asyncio.sleep(1.0)  # well past the deadline
        assert opened == 1  # the second request reused the first connection
        assert len(rc.coord.connected()) == 1 and not task.done()
        assert rc.coord.header_deadline.closed == 0
