#!/usr/bin/env python3
"""The release-skew floor of K processes on this machine: what K gateways releasing N
nodes at one instant cannot beat, measured with plain aiohttp and no netcheck code.

K *writer* processes each hold N/K loopback websocket sessions (aiohttp server side,
uncompressed), connected from K *client* processes (one per writer, plain aiohttp
clients that read and discard: the layout of ``scripts/bench_gateways``). For each
repeat the parent picks an instant T on the machine's shared ``CLOCK_MONOTONIC`` and
every writer turns the garbage collector off, waits for T as a gateway does
(``netcheck.gateway.participant.sleep_until``) and writes one 112-byte payload (a
sealed release frame's size) to each of its sessions:

- ``raw``: a pre-built websocket frame written straight to the socket transport (what
  ``netcheck.gateway.participant.release_at`` does);
- ``send_bytes``: ``await ws.send_bytes(payload)`` per session (the aiohttp floor that
  ``scripts/bench_timing.py`` and issue 11 compare the single coordinator against).

Per repeat: skew = last write end on any writer - first write start on any writer;
start spread (latest first write - T); longest single-writer loop. Medians are printed,
with the load average. ``--clients-nice`` runs the client processes at that nice level
(they stand in for nodes on other hosts).

    .venv/bin/python scripts/bench_release_floor.py --processes 4 --sessions 5000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netcheck.gateway.participant import sleep_until, ws_frame  # noqa: E402
from netcheck.lab.load import (  # noqa: E402
    env_with_code,
    raise_fd_limit,
    sink_server,
    source_address,
)

PAYLOAD = bytes(112)
MODES = ("raw", "send_bytes")


# -- child processes ------------------------------------------------------------------


async def client(port: int, n: int, first: int) -> None:
    """``--client``: ``n`` websocket clients to a writer; read and discard until closed."""
    raise_fd_limit()
    http = [
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=source_address(first + i)))
        for i in range(n)
    ]

    async def one(h: aiohttp.ClientSession) -> None:
        async with h.ws_connect(f"http://127.0.0.1:{port}/", compress=0) as ws:
            async for _ in ws:
                pass

    await asyncio.gather(*(one(h) for h in http), return_exceptions=True)
    for h in http:
        await h.close()


async def writer(n: int) -> None:
    """``--writer``: serve ``n`` sessions; print the port, then ``ready``; then per line
    ``T mode`` on stdin write to every session at T and print the stamps as JSON."""
    raise_fd_limit()
    runner, conns, all_in = await sink_server(n, "/")
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(json.dumps({"port": port}), flush=True)
    await all_in.wait()
    print(json.dumps({"ready": len(conns)}), flush=True)
    loop = asyncio.get_running_loop()
    frame = ws_frame(PAYLOAD)
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        target_s, mode = line.split()
        target = int(target_s)
        transports = [ws._writer.transport for ws in conns]  # type: ignore[union-attr]
        gc.disable()
        await sleep_until(target)  # as the gateways wait for the release instant
        first = time.monotonic_ns()
        if mode == "raw":
            for t in transports:
                t.write(frame)
        else:
            for ws in conns:
                await ws.send_bytes(PAYLOAD)
        last = time.monotonic_ns()
        gc.enable()
        print(json.dumps({"first": first, "last": last}), flush=True)
    for ws in conns:
        await ws.close()
    await runner.cleanup()


# -- the parent ------------------------------------------------------------------------


async def _line(proc: asyncio.subprocess.Process, timeout_s: float) -> dict[str, Any]:
    assert proc.stdout is not None
    raw = await asyncio.wait_for(proc.stdout.readline(), timeout_s)
    if not raw:
        raise RuntimeError("a writer process exited")
    out: dict[str, Any] = json.loads(raw)
    return out


async def parallel_floor(k: int, n: int, repeats: int = 5, clients_nice: int = 0) -> dict[str, Any]:
    """Median skew, start spread and longest loop (ms) of K writers x N/K sessions, per
    mode (:data:`MODES`), alternating; see the module docstring."""
    per = [n // k + (1 if i < n % k else 0) for i in range(k)]
    env = env_with_code(ROOT)
    logdir = Path(tempfile.mkdtemp(prefix="release-floor-"))
    writers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--writer",
            str(m),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(logdir / f"writer{i}.log").open("wb"),
            env=env,
        )  # fmt: skip
        for i, m in enumerate(per)
    ]
    clients: list[subprocess.Popen[bytes]] = []
    try:
        ports = [(await _line(w, 120))["port"] for w in writers]
        for i, (port, m) in enumerate(zip(ports, per, strict=True)):
            clients.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--client", str(port), str(m), str(i * 20_000)],
                    stdout=subprocess.DEVNULL,
                    stderr=(logdir / f"client{i}.log").open("wb"),
                    env=env,
                    preexec_fn=(lambda: os.nice(clients_nice)) if clients_nice else None,
                )  # fmt: skip
            )
        for w in writers:
            await _line(w, 900)  # ready: all sessions in
        out: dict[str, Any] = {"processes": k, "sessions": n, "loadavg": os.getloadavg()[0]}
        spans: dict[str, list[tuple[float, float, float]]] = {m: [] for m in MODES}
        for _ in range(repeats):
            for mode in MODES:
                await asyncio.sleep(0.5)
                target = time.monotonic_ns() + 300_000_000
                for w in writers:
                    assert w.stdin is not None
                    w.stdin.write(f"{target} {mode}\n".encode())
                    await w.stdin.drain()
                got = [await _line(w, 120) for w in writers]
                firsts = [g["first"] for g in got]
                lasts = [g["last"] for g in got]
                spans[mode].append(
                    (
                        (max(lasts) - min(firsts)) / 1e6,
                        (max(firsts) - target) / 1e6,
                        max(g["last"] - g["first"] for g in got) / 1e6,
                    )
                )
        for mode in MODES:
            skew, spread, loop = (statistics.median(x[j] for x in spans[mode]) for j in range(3))
            out[mode] = {"skew_ms": skew, "late_ms": spread, "loop_max_ms": loop,
                         "per_node_us": 1e3 * skew / max(n, 1)}  # fmt: skip
        return out
    finally:
        for w in writers:
            if w.stdin is not None:
                w.stdin.close()
        for w in writers:
            try:
                await asyncio.wait_for(w.wait(), 30)
            except TimeoutError:
                w.kill()
        for c in clients:
            c.terminate()
            c.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--sessions", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--clients-nice", type=int, default=0)
    a = ap.parse_args()
    raise_fd_limit()
    print("| processes | sessions | mode | skew ms | late start ms | longest loop ms "
          "| skew / node µs | loadavg |")  # fmt: skip
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for k in a.processes:
        r = asyncio.run(parallel_floor(k, a.sessions, a.repeats, a.clients_nice))
        for mode in MODES:
            m = r[mode]
            print(f"| {k} | {a.sessions:,} | {mode} | {m['skew_ms']:.1f} | {m['late_ms']:.1f} "
                  f"| {m['loop_max_ms']:.1f} | {m['per_node_us']:.1f} | {r['loadavg']:.1f} |",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--writer":
        asyncio.run(writer(int(sys.argv[2])))
    elif len(sys.argv) == 5 and sys.argv[1] == "--client":
        asyncio.run(client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
    else:
        main()
