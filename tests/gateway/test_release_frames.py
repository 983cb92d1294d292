"""The release loop's pre-built websocket frames are byte-for-byte aiohttp's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import WSMsgType
from aiohttp._websocket.writer import WebSocketWriter

from netcheck.gateway.participant import ws_frame


class _Sink(asyncio.WriteTransport):
    def __init__(self) -> None:
        super().__init__()
        self.data = b""

    def write(self, data: Any) -> None:
        self.data += bytes(data)

    def is_closing(self) -> bool:
        return False


@pytest.mark.parametrize("size", [0, 1, 125, 126, 300, 65535, 65536, 70000])
async def test_ws_frame_matches_aiohttp(size: int) -> None:
    """Every length class (7-bit, 16-bit, 64-bit) encodes as aiohttp's server writer."""
    sink = _Sink()
    writer = WebSocketWriter(object(), sink, use_mask=False)  # type: ignore[arg-type]
    payload = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    await writer.send_frame(payload, WSMsgType.BINARY)
    assert ws_frame(payload) == sink.data
