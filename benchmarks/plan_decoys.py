#!/usr/bin/env python3
"""Planning time of one round with its decoys generated ahead by a DecoyReservoir,
against the baseline in the same run: the same plan with every decoy generated in the
planning thread (what every round did before the reservoir, and what a round still does
when ``decoy_workers = 0`` or nothing was generated ahead).

For each profile (default: h200-torch-bf16, B = 256 prompts of 1,023 characters, and
cpu-tiny) and node count it prints:

- ``inline s``: ``plan_round`` wall time generating every decoy in the calling thread;
- ``ahead s``: the workers' wall time to generate the round's decoys ahead (this must
  fit between two rounds, and runs in other processes, not on the event loop);
- ``plan s``: ``plan_round`` wall time when the decoys were generated ahead;
- ``speed-up`` = inline / plan.

    .venv/bin/python benchmarks/plan_decoys.py --nodes 100 1000 --workers 4
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from netcheck.config import load_profile  # noqa: E402
from netcheck.coordinator.planner import PlanNode, plan_round  # noqa: E402
from netcheck.storage.tables import ReferenceRow  # noqa: E402
from netcheck.workloads import get_workload  # noqa: E402
from netcheck.workloads.reservoir import DecoyReservoir, decoy_target  # noqa: E402

FP = "f" * 64


def one(profile_name: str, n: int, workers: int) -> dict[str, float]:
    profile = load_profile(profile_name)
    t = profile.max_new_tokens
    pool = {
        FP: [
            ReferenceRow(f"c{i}", profile.name, FP, f"canary {i}", (1,) * t, 0.0)
            for i in range(profile.canaries_max * n)
        ]
    }
    nodes = [PlanNode(f"node{i}", FP) for i in range(n)]
    t0 = time.perf_counter()
    plan_round("R0", nodes, pool, profile, random.Random(1))
    inline = time.perf_counter() - t0

    workload = get_workload(profile)
    reservoir = DecoyReservoir(workers)
    try:
        reservoir.take(workload, 1)  # start the worker processes outside the timing
        t0 = time.perf_counter()
        reservoir.refill(workload, decoy_target(profile.batch_size * n))
        while reservoir.ready(workload) < reservoir.pending(workload):
            time.sleep(0.005)
        ahead = time.perf_counter() - t0
        t0 = time.perf_counter()
        plan_round("R1", nodes, pool, profile, random.Random(1), reservoir.source(workload))
        planned = time.perf_counter() - t0
    finally:
        reservoir.close()
    return {"inline_s": inline, "ahead_s": ahead, "plan_s": planned}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--profiles", nargs="+", default=["h200-torch-bf16", "cpu-tiny"])
    ap.add_argument("--nodes", type=int, nargs="+", default=[100])
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 1) // 4))
    args = ap.parse_args()
    print(f"# {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, workers {args.workers}")
    print("| profile | nodes | inline s | ahead s (workers) | plan s | speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.profiles:
        for n in args.nodes:
            r = one(name, n, args.workers)
            print(
                f"| {name} | {n} | {r['inline_s']:.3f} | {r['ahead_s']:.3f} | "
                f"{r['plan_s']:.3f} | {r['inline_s'] / r['plan_s']:.1f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
