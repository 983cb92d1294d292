"""request_header_timeout_s: slowloris connections are closed, real clients are not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from netcheck.lab.load import HashWorker
from netcheck.lab.testing import running_coordinator, small_profile

PROFILE = small_profile("hdr")


async def _closed_within(reader: asyncio.StreamReader, timeout_s: float) -> bool:
    """True if the peer closes (EOF) within ``timeout_s``; reads and drops any data."""
    try:
        async with asyncio.timeout(timeout_s):
            while await reader.read(65536):
                pass
        return True
    except TimeoutError:
        return False


async def test_incomplete_first_request_is_closed(tmp_path: Path) -> None:
    async with running_coordinator(tmp_path, [PROFILE], request_header_timeout_s=0.5) as rc:
        idle_r, idle_w = await asyncio.open_connection("127.0.0.1", rc.port)  # sends nothing
        slow_r, slow_w = await asyncio.open_connection("127.0.0.1", rc.port)
        slow_w.write(b"GET /v1/ws HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        # Without the deadline both stay open (aiohttp's own default is 3630 s).
        assert await _closed_within(idle_r, 10.0)
        assert await _closed_within(slow_r, 10.0)
        idle_w.close()
        slow_w.close()


async def test_trickled_second_request_on_keepalive_is_closed(tmp_path: Path) -> None:
    """One complete request, then the next one's headers one byte at a time."""
    async with running_coordinator(tmp_path, [PROFILE], request_header_timeout_s=0.5) as rc:
        r, w = await asyncio.open_connection("127.0.0.1", rc.port)
        w.write(b"GET /dashboard/login HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await r.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")

        async def trickle() -> None:
            for byte in b"GET /dashboard/login HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                w.write(bytes([byte]))
                await asyncio.sleep(0.1)

        task = asyncio.create_task(trickle())
        try:
            assert await _closed_within(r, 5.0)
        finally:
            task.cancel()
            w.close()


async def test_sessions_outlive_the_timeout(tmp_path: Path) -> None:
    """A node session is inside its HTTP request: the timeout never cuts it."""
    async with running_coordinator(tmp_path, [PROFILE], request_header_timeout_s=0.3) as rc:
        task = rc.start(rc.node(HashWorker(PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1, timeout_s=10.0)
        await asyncio.sleep(1.5)  # five timeouts with the session idle between rounds
        assert len(rc.coord.connected()) == 1 and not task.done()


async def test_prompt_http_clients_keep_their_connection(tmp_path: Path) -> None:
    """Requests that come within the timeout reuse one keep-alive connection (5 s of
    room per 0.1 s gap, so a loaded machine cannot make this flaky)."""
    async with running_coordinator(tmp_path, [PROFILE], request_header_timeout_s=5.0) as rc:
        page = f"http://127.0.0.1:{rc.port}/dashboard/login"
        opened = 0

        async def on_open(*_: object) -> None:
            nonlocal opened
            opened += 1

        trace = aiohttp.TraceConfig()
        trace.on_connection_create_end.append(on_open)
        async with aiohttp.ClientSession(trace_configs=[trace]) as http:
            for _ in range(3):
                async with http.get(page) as resp:
                    await resp.read()
                    assert resp.status == 200
                await asyncio.sleep(0.1)
        assert opened == 1  # every request reused the first connection
