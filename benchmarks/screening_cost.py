"""Cost of the leader's screening analysis at scale (issue 16: "screening is still
single-process"), and what it does to the event loop that serves the leader's sessions.

Builds a window of EMULATED screening rounds (N honest nodes, R rounds, each node loaded
in a random half of the rounds, log-normal service times, ~1% missing results) as the
``StoredRounds`` that ``FlagStore.recent_rounds`` returns, then, per N:

- ``analyse`` (netcheck.analysis.screening: matrix, median polish, detectors) wall and
  CPU time, run alone;
- the event loop's lag (how late a 1 ms timer fires; max and p99) while the analysis
  runs (a) in a thread (``asyncio.to_thread``, as ``Screening.analyse_and_confirm`` and
  the after-round checks run it) and (b) in a worker process (spawned, the window
  pickled to it), next to the lag of an idle loop.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/screening_cost.py --nodes 1000 5000 --rounds 32
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing
import os
import pickle
import time
from typing import Any

import numpy as np

from netcheck.analysis.detector_config import DetectorConfig
from netcheck.analysis.screening import analyse
from netcheck.records import RoundKind, StoredRounds

DEADLINE_S = 20.0


def window(n: int, r: int, seed: int = 0) -> StoredRounds:
    """``r`` screening rounds of ``n`` EMULATED honest nodes (module docstring)."""
    rng = np.random.default_rng(seed)
    keys = [f"ed25519:node{i:06d}" for i in range(n)]
    speed = rng.lognormal(0.0, 0.05, n)
    ids: list[str] = []
    kinds: dict[str, str] = {}  # as the database holds them (StoredRounds.kinds)
    schedules: dict[str, dict[str, bool]] = {}
    results: list[dict[str, Any]] = []
    t = 1_000_000_000_000
    for j in range(r):
        rid = f"r{j:05d}"
        ids.append(rid)
        kinds[rid] = str(RoundKind.SCREENING)
        loaded = rng.random(n) < 0.5
        schedules[rid] = {k: bool(b) for k, b in zip(keys, loaded, strict=True)}
        service = 2.0 * speed * rng.lognormal(0.0, 0.05, n)
        for i in np.flatnonzero(loaded):
            missing = rng.random() < 0.01
            results.append({
                "round_id": rid, "node_key": keys[i], "released_ns": t,
                "arrived_ns": None if missing else t + int(service[i] * 1e9),
                "rtt_s": 0.001, "session_id": None, "commitment": None, "signature": None,
                "error": None, "extra": {},
            })  # fmt: skip
        t += 60_000_000_000
    return StoredRounds(tuple(ids), kinds, schedules, tuple(results))


def _analyse_sizes(stored: StoredRounds) -> tuple[int, int]:
    a = analyse(stored, DEADLINE_S, DetectorConfig())
    return len(a.matrix.node_keys), len(a.detection.edges)


async def _lag_while(job: Any) -> dict[str, float]:
    """Run ``job`` (an awaitable factory) while a 1 ms ticker measures how late it fires."""
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append((time.perf_counter() - t0 - 0.001) * 1e3)

    tick = asyncio.create_task(ticker())
    t0 = time.perf_counter()
    await job()
    wall = time.perf_counter() - t0
    stop.set()
    await tick
    lags.sort()
    return {"wall_s": wall, "lag_max_ms": lags[-1], "lag_p99_ms": lags[int(0.99 * (len(lags) - 1))]}


async def run(n: int, r: int) -> dict[str, Any]:
    stored = window(n, r)
    cpu0, t0 = time.process_time(), time.perf_counter()
    sizes = _analyse_sizes(stored)
    alone = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - cpu0}
    pickled = len(pickle.dumps(stored))
    idle = await _lag_while(lambda: asyncio.sleep(alone["wall_s"]))
    thread = await _lag_while(lambda: asyncio.to_thread(_analyse_sizes, stored))
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(pool, _analyse_sizes, window(10, 4))  # start the worker
        proc = await _lag_while(lambda: loop.run_in_executor(pool, _analyse_sizes, stored))
    return {"nodes": n, "rounds": r, "rows": len(stored.results), "sizes": sizes,
            "alone": alone, "pickled_mb": pickled / 1e6, "idle": idle, "thread": thread,
            "process": proc, "loadavg": os.getloadavg()[0]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--rounds", type=int, default=32)
    a = ap.parse_args()
    rows = [asyncio.run(run(n, a.rounds)) for n in a.nodes]
    print(
        "| nodes | rounds | result rows | analyse wall s / CPU s | window pickled MB "
        "| loop lag ms max / p99: idle | in a thread | in a process (wall s) | loadavg |"
    )
    print("|---:|---:|---:|---|---:|---|---|---|---:|")
    for x in rows:
        lag = {k: f"{x[k]['lag_max_ms']:.1f} / {x[k]['lag_p99_ms']:.1f}"
               for k in ("idle", "thread", "process")}  # fmt: skip
        print(f"| {x['nodes']:,} | {x['rounds']} | {x['rows']:,} | {x['alone']['wall_s']:.2f} / "
              f"{x['alone']['cpu_s']:.2f} | {x['pickled_mb']:.1f} | {lag['idle']} | "
              f"{lag['thread']} ({x['thread']['wall_s']:.2f} s) | {lag['process']} "
              f"({x['process']['wall_s']:.2f} s) | {x['loadavg']:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
