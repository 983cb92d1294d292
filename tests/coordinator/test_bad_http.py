"""Malformed HTTP from anyone who can reach the port (raw bytes that are not UTF-8 in the
request line, a bad header line) is answered 400 by aiohttp's parser, which logged each
one at ERROR with a traceback: a client could fill the coordinator's log with alerts.
Now one WARNING line per request, naming the client and the parser's reason."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from netcheck.lab.testing import running_coordinator, small_profile

PROFILE = small_profile("badhttp")

REQUESTS = [
    b"GET /admin/rounds/\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET /dashboard/nodes?token=\xff HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header Line\r\nConnection: close\r\n\r\n",
]


async def _status_line(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    return line


async def test_malformed_requests_are_400_and_one_warning_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        for request in REQUESTS:
            assert b" 400 " in await _status_line(rc.port, request), request
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors
    warned = [r for r in caplog.records if "bad HTTP request" in r.getMessage()]
    assert len(warned) == len(REQUESTS), [r.getMessage() for r in caplog.records]
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in warned)
