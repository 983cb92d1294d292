#!/usr/bin/env python3
"""Per-node cost of the release loop's write: aiohttp ``send_bytes`` (what the single
coordinator's loop awaits per node) vs a pre-built websocket frame written straight to
the transport (the gateway's loop, netcheck.gateway.participant.release_at), measured in
the same run on the same N loopback websocket sessions, alternating, 112-byte payloads
(a sealed release frame's size).

    .venv/bin/python scripts/bench_release_write.py --sessions 1000 --repeats 7
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from netcheck.gateway.participant import ws_frame  # noqa: E402
from netcheck.lab.load import sink_server  # noqa: E402

PAYLOAD = bytes(112)


async def main(n: int, repeats: int) -> None:
    runner, server_ws, ready = await sink_server(n, "/")
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    received = 0

    async def client() -> None:
        nonlocal received
        ws = await http.ws_connect(f"http://127.0.0.1:{port}/", compress=0)
        async for _ in ws:
            received += 1

    tasks = [asyncio.create_task(client()) for _ in range(n)]
    await ready.wait()
    frame = ws_frame(PAYLOAD)
    send_us, raw_us = [], []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for ws in server_ws:
            await ws.send_bytes(PAYLOAD)
        send_us.append((time.perf_counter_ns() - t0) / n / 1e3)
        await asyncio.sleep(0.3)
        t0 = time.perf_counter_ns()
        for ws in server_ws:
            ws._writer.transport.write(frame)  # type: ignore[union-attr]
        raw_us.append((time.perf_counter_ns() - t0) / n / 1e3)
        await asyncio.sleep(0.3)
    await asyncio.sleep(1.0)
    s, r = statistics.median(send_us), statistics.median(raw_us)
    print(f"{n} sessions, {repeats} alternating repeats, loadavg {os.getloadavg()[0]:.1f}")
    print(f"  send_bytes loop:    {s:.1f} µs/node (median; min {min(send_us):.1f})")
    print(f"  transport.write:    {r:.1f} µs/node (median; min {min(raw_us):.1f})")
    print(f"  ratio: {s / r:.2f}x; frames received {received} of {2 * n * repeats}")
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await http.close()
    await runner.cleanup()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    asyncio.run(main(a.sessions, a.repeats))
