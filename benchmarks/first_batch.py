"""First-batch cost of a freshly loaded engine: what the node's warm-up pays for.

Loads the profile's engine in this process (the real engine, as ``netcheck node run``
does), then runs ``--batches`` full batches of fresh prompts through the node's own
:func:`netcheck.node.warmup.warm_up` and prints each batch's seconds, the first batch's
excess over the median of the warm ones, and what :func:`netcheck.node.warmup.assess`
would tell the node operator with ``warmup_batches`` = 1 and 2.

    python3 benchmarks/first_batch.py --profile h200-torch-bf16 --batches 5

The baseline in the same run is the warm median (batches 3..N). Engine load time is
printed too (model on local disk; synth models are generated first if missing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from netcheck.config import load_profile
from netcheck.engines import load_engine
from netcheck.node.warmup import assess, warm_up
from netcheck.node.workers import EngineWorker


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="cpu-tiny")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--json", help="also write the figures as JSON here")
    args = ap.parse_args()
    if args.batches < 3:
        ap.error("--batches must be at least 3 (two to warm, one warm baseline)")
    profile = load_profile(args.profile)
    t0 = time.perf_counter()
    engine = load_engine(profile)
    load_s = time.perf_counter() - t0
    times = asyncio.run(warm_up(EngineWorker(engine), profile, args.batches))
    warm = statistics.median(times[2:])
    print(f"profile {profile.name}: engine load {load_s:.2f} s, t_ref {profile.deadline.t_ref_s} s")
    for i, t in enumerate(times, 1):
        print(f"  batch {i}: {t:.3f} s ({t / warm:.2f}x the warm median {warm:.3f} s)")
    print(f"first-batch excess: {times[0] - warm:+.3f} s")
    verdicts = {}
    print(
        f"  warmup_batches=0: the node's first round would take {times[0]:.3f} s "
        f"(deadline at rtt 0: {profile.deadline_s(0.0):.3f} s)"
    )
    for n in (1, 2):
        # what a node with warmup_batches = n is told at start (its warm-up batches)
        verdicts[n] = assess(times[:n], profile).message
        print(f"  warmup_batches={n}: {verdicts[n]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "profile": profile.name,
                    "load_s": load_s,
                    "batch_s": times,
                    "warm_median_s": warm,
                    "first_excess_s": times[0] - warm,
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
