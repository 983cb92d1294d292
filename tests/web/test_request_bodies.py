"""Whole requests are bounded (#12 item 6): a trickled body gets 408 in time, and a
client gone mid-body costs one log line, not a traceback."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from netcheck.lab.testing import running_coordinator, small_profile

PROFILE = small_profile()
HEAD = (
    "POST /dashboard/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 200\r\n\r\n"
)


async def test_trickled_login_body_is_refused_in_time(tmp_path: Path) -> None:
    """A body trickled one byte every 0.2 s gets 408 and a closed connection within the
    1 s bound (it was held open for as long as the client kept trickling)."""
    async with running_coordinator(tmp_path, [PROFILE], request_header_timeout_s=1.0) as rc:
        reader, writer = await asyncio.open_connection("127.0.0.1", rc.port)
        writer.write(HEAD.encode())
        t0 = time.monotonic()
        answer = b""
        for _ in range(40):  # up to 8 s of trickling
            writer.write(b"t")
            try:
                await writer.drain()
                answer += await asyncio.wait_for(reader.read(4096), 0.2)
            except TimeoutError:
                continue
            except ConnectionError:
                break
            if answer:
                break
        took = time.monotonic() - t0
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        assert took < 3.0, took


async def test_client_gone_mid_body_logs_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that disconnects mid-body leaves one warning line and no traceback."""
    caplog.set_level(logging.INFO)
    async with running_coordinator(tmp_path, [PROFILE], request_header_timeout_s=5.0) as rc:
        reader, writer = await asyncio.open_connection("127.0.0.1", rc.port)
        writer.write(HEAD.encode() + b"token=abc")
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.transport.abort()
        await asyncio.sleep(0.5)
    records = [r for r in caplog.records if "/dashboard/login" in r.getMessage()]
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    assert "client gone mid-body" in records[0].getMessage()
    assert tracebacks == [], [r.getMessage() for r in tracebacks]
