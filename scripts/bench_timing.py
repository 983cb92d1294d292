#!/usr/bin/env python3
"""Timing accuracy of the coordinator's clock: arrival-stamp error, release skew vs the
aiohttp floor, and plan time, over real signed sessions on loopback.

For each code under test (this checkout, and with --baseline DIR another checkout such
as main's, run in the same invocation so both see the same machine), each result shape
(--shapes: ``small`` = cpu-tiny, B=16 x 64 ids < 258, ~0.3 KB frames; ``h200`` = B=240
x 32 ids < 128,256, ~39 KB frames, the H200 profiles' size) and each node count
(--nodes): a ``netcheck coordinator serve`` subprocess (SQLite) and client hosts of
EMULATED timed nodes (:mod:`netcheck.lab.timed_nodes`) that answer a KNOWN service
time after release and stamp, on the machine's shared monotonic clock, when their
result frame was written. Per round and node:

- measured latency = coordinator arrival stamp - the node's own release-write stamp
  (what the verdicts use; read from the ``results`` table);
- true latency = the node's stamp taken just before it wrote its result frame (the
  bytes cannot reach the coordinator earlier) - the same release-write stamp;
- **stamp error = measured - true** = arrival stamp - node write start (p50 / p99 / max
  over all nodes and rounds): loopback transit plus everything the coordinator does
  before it stamps. (The node's stamp *after* its write is not used: under load the
  node's event loop may resume the writing task long after the bytes left.)
  Where the kernel gives transmit stamps (``netcheck.lab.txstamps``: the instant the
  frame's last byte left the sending host's stack), the error is split into **sender**
  = transmit stamp - write start (the emulated host's own stack: scheduling, pacing,
  deferred softirq work; on one host with 1,000 senders this is not the coordinator)
  and **path** = arrival stamp - transmit stamp (delivery plus everything the
  coordinator does before it stamps).

Also per run: release skew (first release write start to last write end, median of the
rounds) next to the **floor**: the same number of ``send_bytes`` of a release-sized
frame to as many plain aiohttp websocket sessions, measured by this process in the same
minute; plan seconds (median); and how late the emulated nodes themselves sent
(``node lag`` = write start - intended send time: the emulator's own jitter, not
coordinator error).

    .venv/bin/python scripts/bench_timing.py --nodes 100 1000 --shapes h200 \\
        --mode instant --rounds 3 --baseline /tmp/netcheck-main

``--mode instant``: every node of a host answers at the same instant (worst burst);
``--mode own --spread 0.2``: service times spread evenly over 0.2 s.

The table's ``stamp source`` column counts the results by the source of their arrival
stamp as the coordinator recorded it (``kernel``: kernel receive timestamp; ``read``:
the socket read callback; ``reader``: the reader task; ``n/a``: code that does not
record it, e.g. an older baseline), and the coordinator's own start-up line about its
stamps is printed under the table.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, TCPConnector, WSMsgType, web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netcheck.lab.demo import free_port  # noqa: E402
from netcheck.lab.load import (  # noqa: E402
    env_with_code,
    raise_fd_limit,
    sink_server,
    source_address,
)
from netcheck.lab.loadrun import LoadRun  # noqa: E402
from netcheck.storage.tables import results  # noqa: E402

SHAPES: dict[str, dict[str, Any]] = {
    "small": {"overrides": {}, "vocab": 258},
    "h200": {"overrides": {"batch_size": 240, "max_new_tokens": 32}, "vocab": 128256},
}
RELEASE_FRAME_BYTES = 110  # a release frame: header, tag, round id, 32-byte job key
NODES_PER_HOST = 500


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def profile_overrides(shape: str) -> dict[str, Any]:
    return {
        **SHAPES[shape]["overrides"],
        "deadline": {"t_ref_s": 60.0, "a": 1.5, "slack_s": 5.0},
        "dispatch_timeout_s": 120.0,
        "result_timeout_s": 120.0,
    }


async def wait_files(paths: list[Path], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(p.exists() and p.read_text().strip() for p in paths):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"not ready after {timeout_s:.0f} s: {paths}")


def service_s(args: argparse.Namespace, n: int) -> float:
    return float(args.service) if args.service is not None else 1.0 + 0.02 * n


def start_timed_hosts(run: LoadRun, n: int, vocab: int, args: argparse.Namespace) -> list[Path]:
    hosts = max(1, -(-n // (getattr(args, "per_host", None) or NODES_PER_HOST)))
    reports = []
    first = 0
    for i in range(hosts):
        count = n // hosts + (1 if i < n % hosts else 0)
        report = run.workdir / f"timed-{i}.ready"
        reports.append(report)
        cmd = [
            "-m", "netcheck.lab.timed_nodes", "--url", run.url,
            "--coordinator-key", run.coordinator_key, "--profile", run.profile.name,
            "--max-new-tokens", str(run.profile.max_new_tokens), "--vocab", str(vocab),
            "--count", str(count), "--first-index", str(first), "--total", str(n),
            "--service", str(service_s(args, n)), "--spread", str(args.spread),
            "--mode", args.mode, "--stamps", str(run.workdir / f"stamps-{i}.jsonl"),
            "--report", str(report),
            *([f"--congestion={cc}"] if (cc := getattr(args, "node_congestion", None)) else []),
        ]  # fmt: skip
        run.hosts.append(run._spawn(f"timed-{i}", cmd))
        first += count
    return reports


def read_stamps(workdir: Path, round_id: str) -> dict[str, dict[str, Any]]:
    out = {}
    for path in workdir.glob("stamps-*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row["round_id"] == round_id:
                out[row["node_key"]] = row
    return out


def coordinator_stamps(run: LoadRun, round_id: str) -> dict[str, tuple[int, int]]:
    with run.store() as store, store._engine.connect() as conn:
        q = results.select().where(results.c.round_id == round_id)
        return {
            r.node_key: (r.released_ns, r.arrived_ns)
            for r in conn.execute(q)
            if r.released_ns is not None and r.arrived_ns is not None
        }


# -- the aiohttp send_bytes floor -----------------------------------------------------


async def floor_client(url: str, n: int, ready: Path) -> None:
    """``--floor-client``: ``n`` plain websocket clients that read and discard."""
    raise_fd_limit()
    sessions = []

    async def one(i: int) -> None:
        http = ClientSession(connector=TCPConnector(local_addr=source_address(60_000 + i)))
        sessions.append(http)
        ws = await http.ws_connect(url)
        async for msg in ws:
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.ERROR):
                break

    tasks = [asyncio.create_task(one(i)) for i in range(n)]
    await asyncio.sleep(0)
    ready.write_text("started\n")
    await asyncio.gather(*tasks, return_exceptions=True)
    for s in sessions:
        await s.close()


async def measure_floor(n: int, reps: int, workdir: Path) -> float:
    """Median over ``reps`` of (last send_bytes end - first start) to ``n`` sessions."""
    runner, conns, all_in = await sink_server(n, "/ws")
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    ready = workdir / "floor.ready"
    proc = subprocess.Popen(
        [sys.executable, __file__, "--floor-client", f"ws://127.0.0.1:{port}/ws", str(n),
         str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await asyncio.wait_for(all_in.wait(), 300)
        frame = os.urandom(RELEASE_FRAME_BYTES)
        spans = []
        for _ in range(reps):
            await asyncio.sleep(0.2)
            t0 = time.monotonic_ns()
            for ws in conns:
                await ws.send_bytes(frame)
            spans.append((time.monotonic_ns() - t0) / 1e9)
        return statistics.median(spans)
    finally:
        for ws in conns:
            await ws.close()
        proc.wait(timeout=60)
        await runner.cleanup()


# -- one run --------------------------------------------------------------------------


async def bench_one(
    code: str, code_dir: Path, shape: str, n: int, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    vocab = SHAPES[shape]["vocab"]
    extra = {} if args.decoy_workers is None else {"decoy_workers": args.decoy_workers}
    with LoadRun(workdir, None, profile_overrides(shape), extra) as run:
        run.add_references(run.profile.canaries_max * n * (args.rounds + 2) + 100, vocab=vocab)
        old = os.environ.get("PYTHONPATH")
        # the coordinator runs the code under test; entries already on PYTHONPATH (e.g. a
        # folder of carried wheels on the device machine) stay behind it
        os.environ["PYTHONPATH"] = env_with_code(code_dir)["PYTHONPATH"]
        try:
            run.start_coordinator()
        finally:
            os.environ["PYTHONPATH"] = old or ""
        await run.wait_connected(0, timeout_s=60)
        reports = start_timed_hosts(run, n, vocab, args)
        await wait_files(reports, 900)
        await run.wait_connected(n, timeout_s=300)
        await run.run_round()  # warm-up, not counted
        errors, lags, designed_err, skews, plans, frames = [], [], [], [], [], []
        sender, path = [], []  # split of the stamp error at the kernel's transmit stamp
        parts: list[dict[str, float]] = []
        sources: collections.Counter[str] = collections.Counter()
        partial = 0
        for _ in range(args.rounds):
            await asyncio.sleep(args.gap)
            rep = await run.run_round()
            rid = rep["round_id"]
            coord = coordinator_stamps(run, rid)
            await asyncio.sleep(0.3)  # the hosts append their stamp lines after writing
            nodes = read_stamps(workdir, rid)
            for key, (released, arrived) in coord.items():
                s = nodes.get(key)
                if s is None:
                    continue
                errors.append((arrived - s["send_start_ns"]) / 1e6)
                lags.append((s["send_start_ns"] - s["target_ns"]) / 1e6)
                designed_err.append((arrived - released) / 1e9 - s["service_s"])
                frames.append(s["frame_bytes"])
                partial += s.get("left_in_buffer", 0) > 0
                if s.get("tx_snd_ns") is not None:
                    sender.append((s["tx_snd_ns"] - s["send_start_ns"]) / 1e6)
                    path.append((arrived - s["tx_snd_ns"]) / 1e6)
            skews.append(rep["phases"]["release_skew_s"])
            plans.append(rep["phases"]["plan_s"])
            parts.append({k: v for k, v in rep["phases"].items() if k.startswith("plan_")})
            for v in rep["verdicts"]:  # the arrival stamp's source per result (this code)
                timing = v.get("timing") or {}
                if timing.get("arrived_ns") is not None:
                    sources[str(timing.get("arrival_stamp", "n/a"))] += 1
            bad = [v for v in rep["verdicts"] if v["verdict"] != "pass"]
            if bad:
                print(f"# {code} {shape} {n}: {len(bad)} not pass, e.g. {bad[0]}", file=sys.stderr)
        floor = await measure_floor(n, 5, workdir)
        log_path = run.workdir / "logs" / "coordinator.log"
        lines = log_path.read_text(errors="replace").splitlines()
        said = [line for line in lines if "arrival stamps:" in line]
        # nodes sampled by the round itself, per round (code with a background prober)
        inline = [line.rsplit("RTT sets taken now", 1)[1].strip() for line in lines
                  if "RTT sets taken now" in line]  # fmt: skip
    return {
        "stamps": " ".join(f"{k}:{c}" for k, c in sorted(sources.items()) if c) or "n/a",
        "stamps_log": said[-1].split("arrival stamps:", 1)[1].strip()[:60] if said else "",
        "code": code, "shape": shape, "nodes": n, "samples": len(errors), "partial": partial,
        "frame_kb": statistics.median(frames) / 1000 if frames else 0.0,
        "err_p50": pct(errors, 0.5), "err_p99": pct(errors, 0.99), "err_max": max(errors),
        "err_min": min(errors), "lag_p99": pct(lags, 0.99),
        "tx_samples": len(path),
        "sender_p50": pct(sender, 0.5) if sender else None,
        "sender_p99": pct(sender, 0.99) if sender else None,
        "path_p50": pct(path, 0.5) if path else None,
        "path_p99": pct(path, 0.99) if path else None,
        "path_max": max(path) if path else None,
        "vs_designed_p99_ms": 1e3 * pct(designed_err, 0.99),
        "skew_ms": 1e3 * statistics.median(skews), "floor_ms": 1e3 * floor,
        "plan_s": statistics.median(plans),
        "rtt_inline": ",".join(inline[-args.rounds:]) if inline else "n/a",
        "plan_parts": {k: statistics.median(p[k] for p in parts) for k in parts[0]},
    }  # fmt: skip


def _split(row: dict[str, Any], part: str, *stats: str) -> str:
    """``p50 / p99 [/ max]`` of one part of the stamp error, or ``n/a`` without
    transmit stamps."""
    if not row.get("tx_samples"):
        return "n/a"
    return " / ".join(f"{row[f'{part}_{q}']:.2f}" for q in stats) + f" ({row['tx_samples']})"


def system_cc() -> str:
    path = Path("/proc/sys/net/ipv4/tcp_congestion_control")
    return f"system ({path.read_text().strip() if path.exists() else '?'})"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="netcheck-timing-"))
    codes = [("this", ROOT)] + ([("baseline", args.baseline)] if args.baseline else [])
    rows = []
    print(f"# load average at start: {loadavg()}; {os.cpu_count()} CPUs", file=sys.stderr)
    for n in args.nodes:
        for shape in args.shapes:
            for code, code_dir in codes:
                t0 = time.monotonic()
                row = await bench_one(code, code_dir, shape, n, args, root / f"{code}-{shape}-{n}")
                row["load"] = loadavg()
                rows.append(row)
                print(
                    f"# {code} {shape} {n}: {time.monotonic() - t0:.0f} s, {row}", file=sys.stderr
                )
    print(
        f"mode={args.mode} service={args.service or '1 s + 20 ms/node'} spread={args.spread}s "
        f"rounds={args.rounds} gap={args.gap}s "
        f"node congestion control={args.node_congestion or system_cc()}\n"
        "| code | shape | nodes | frame KB | stamp error ms p50 / p99 / max (min) "
        "| of which sender ms p50 / p99 | path ms p50 / p99 / max "
        "| release skew ms | send floor ms | skew/floor | plan s | node lag p99 ms | partial writes "
        "| stamp source (results) | load avg |"
    )
    print("|---|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        print(
            f"| {r['code']} | {r['shape']} | {r['nodes']} | {r['frame_kb']:.1f} | "
            f"{r['err_p50']:.2f} / {r['err_p99']:.2f} / {r['err_max']:.2f} ({r['err_min']:.2f}) | "
            f"{_split(r, 'sender', 'p50', 'p99')} | {_split(r, 'path', 'p50', 'p99', 'max')} | "
            f"{r['skew_ms']:.1f} | {r['floor_ms']:.1f} | {r['skew_ms'] / r['floor_ms']:.2f} | "
            f"{r['plan_s']:.2f} | {r['lag_p99']:.1f} | {r['partial']}/{r['samples']} | "
            f"{r['stamps']} | {r['load']} |"
        )
    print("\nplan s (median of the rounds): total = sampling + pool + draw + persist")
    for r in rows:
        pp = r["plan_parts"]
        print(
            f"# {r['code']} {r['shape']} {r['nodes']}: plan {pp['plan_s']:.3f} = sampling "
            f"{pp.get('plan_sampling_s', float('nan')):.3f} + pool "
            f"{pp.get('plan_pool_s', float('nan')):.3f} + draw "
            f"{pp.get('plan_draw_s', float('nan')):.3f} + persist "
            f"{pp.get('plan_persist_s', float('nan')):.3f}; nodes sampled by the round "
            f"itself (per round): {r['rtt_inline']}"
        )
    for r in rows:
        if r["stamps_log"]:
            print(f"# {r['code']} {r['shape']} {r['nodes']}: coordinator said: {r['stamps_log']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"(scratch: {root})", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--floor-client":
        asyncio.run(floor_client(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])))
        sys.exit(0)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["small", "h200"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--per-host",
        type=int,
        default=NODES_PER_HOST,
        help="emulated nodes per client host process (fewer = more processes, for more cores)",
    )
    ap.add_argument(
        "--service", type=float,
        help="EMULATED service time (s); default 1 s + 20 ms per node, so every emulated "
        "node has its result sealed before the common send instant on 2 busy cores",
    )  # fmt: skip
    ap.add_argument("--spread", type=float, default=0.0)
    ap.add_argument("--mode", choices=("instant", "own"), default="instant")
    ap.add_argument("--baseline", type=Path, help="another checkout to compare (e.g. main)")
    ap.add_argument(
        "--node-congestion",
        help="TCP congestion control of the emulated nodes' sockets (e.g. reno: no "
        "sender pacing; default: the system's, shown in the table header)",
    )
    ap.add_argument(
        "--gap", type=float, default=0.5,
        help="seconds between rounds (the coordinator's background RTT prober replaces "
        "the sets a round used within rtt_refresh_s / 4 = 2.5 s by default)",
    )  # fmt: skip
    ap.add_argument(
        "--decoy-workers", type=int,
        help="the coordinators' decoy_workers (default: theirs, 0 below 4 CPUs: decoys "
        "are then generated in the planning thread, part of plan_draw_s)",
    )  # fmt: skip
    ap.add_argument("--json", help="also write the rows as JSON here")
    raise_fd_limit()
    asyncio.run(main(ap.parse_args()))
