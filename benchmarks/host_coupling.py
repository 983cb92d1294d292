"""Benign host coupling on a real card: how much a busy host slows an honest node.

Every detector allows an honest node to be slowed by *benign co-hosting coupling* (other
nodes on the same host, up to 20%: docs/detection.md, docs/capacity.md), and the capacity
test needs an honest node to be late past the profile's deadline in at most
``capacity_p0`` (3%) of its rounds. This measures, on the card it runs on, the profile's
batch time through the node's own engine worker (:func:`netcheck.node.warmup.warm_up`,
fresh prompts per batch) while the *host* is loaded the way other nodes on it would load
it, and the share of batches past the deadline (``profile.deadline_s(0)``: zero RTT, a
node on the coordinator's host):

- ``idle``: nothing else runs (the baseline, measured first and again last);
- ``cpu``: ``nproc - 2`` processes spin Python and small numpy work (other nodes'
  tokenizers, event loops, msgpack);
- ``membw``: ``nproc / 2`` processes stream 256 MB array copies (host memory bandwidth);
- ``cpu+membw``: both.

It cannot load *another* GPU of the host (one card lent): GPU-to-GPU channels (power,
PCIe root complex, NVLink) are not in it. Command (device, the profile's synthetic model
is generated first if missing):

    python3 benchmarks/host_coupling.py --profile h200-torch-bf16 --batches 24

Prints per condition: median, p90, max seconds, the ratio of the median to the idle
median, and the late share at the profile's deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import time

import numpy as np

from netcheck.config import load_profile
from netcheck.engines import load_engine
from netcheck.node.warmup import warm_up
from netcheck.node.workers import EngineWorker


def _spin_cpu(stop: mp.synchronize.Event) -> None:  # type: ignore[name-defined]
    a = np.random.default_rng(0).random((64, 64))
    while not stop.is_set():
        x = 0
        for i in range(20_000):
            x += i * i
        a = a @ a
        a /= np.abs(a).max() + 1.0


def _stream_memory(stop: mp.synchronize.Event) -> None:  # type: ignore[name-defined]
    src = np.ones(32 * 1024 * 1024)  # 256 MB of float64
    dst = np.empty_like(src)
    while not stop.is_set():
        np.copyto(dst, src)
        np.copyto(src, dst)


def _start(condition: str, stop: mp.synchronize.Event) -> list[mp.Process]:  # type: ignore[name-defined]
    n = os.cpu_count() or 2
    targets = []
    if "cpu" in condition:
        targets += [_spin_cpu] * max(1, n - 2)
    if "membw" in condition:
        targets += [_stream_memory] * max(1, n // 2)
    procs = [mp.Process(target=t, args=(stop,), daemon=True) for t in targets]
    for p in procs:
        p.start()
    return procs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="cpu-tiny")
    ap.add_argument("--batches", type=int, default=16, help="timed batches per condition")
    ap.add_argument(
        "--conditions", nargs="+", default=["idle", "cpu", "membw", "cpu+membw", "idle"]
    )
    ap.add_argument("--json", help="also write the figures as JSON here")
    args = ap.parse_args()
    profile = load_profile(args.profile)
    engine = load_engine(profile)
    worker = EngineWorker(engine)
    deadline = profile.deadline_s(0.0)
    asyncio.run(warm_up(worker, profile, 3))
    print(
        f"profile {profile.name}: t_ref {profile.deadline.t_ref_s} s, deadline at rtt 0 {deadline:.4f} s"
    )
    results = []
    base = None
    for cond in args.conditions:
        stop = mp.Event()
        procs = _start(cond, stop) if cond != "idle" else []
        time.sleep(2.0 if procs else 0.0)  # let the stressors reach steady state
        times = asyncio.run(warm_up(worker, profile, args.batches))
        stop.set()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
        med = statistics.median(times)
        base = base or med
        row = {
            "condition": cond,
            "stressors": len(procs),
            "batch_s": times,
            "median_s": med,
            "p90_s": float(np.percentile(times, 90)),
            "max_s": max(times),
            "ratio_to_idle": med / base,
            "late_share": sum(t > deadline for t in times) / len(times),
            "median_over_t_ref": med / profile.deadline.t_ref_s,
        }
        results.append(row)
        print(
            f"  {cond:<10} ({len(procs):>2} stressors): median {med:.4f} s, p90 {row['p90_s']:.4f}, "
            f"max {row['max_s']:.4f}, x{row['ratio_to_idle']:.3f} idle, "
            f"{row['median_over_t_ref']:.3f} t_ref, late {row['late_share']:.2f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"profile": profile.name, "deadline_rtt0_s": deadline, "cpus": os.cpu_count(),
                       "conditions": results}, f, indent=2)  # fmt: skip


if __name__ == "__main__":
    main()
