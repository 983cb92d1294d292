#!/usr/bin/env python3
"""Time real validation rounds, phase by phase, with real node processes (no emulation).

Starts ``netcheck coordinator serve`` and N ``netcheck node run`` processes on loopback
for one profile, builds references, runs R rounds through the admin API and prints the
median (and max) of each phase: plan (RTT + probe measurement, planning, persisting),
dispatch (jobs out, acks in), release skew (first to last release frame written),
compute (median node time from release to result), verify, total.

    .venv/bin/python scripts/bench_round.py --profile cpu-tiny --nodes 3 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netcheck.admin_client import admin_request  # noqa: E402
from netcheck.config import load_coordinator_config, load_profile  # noqa: E402
from netcheck.lab.demo import Processes, build_demo_references, write_configs  # noqa: E402
from netcheck.lab.demo import wait_connected as wait_nodes  # noqa: E402

PHASES = ("plan_s", "dispatch_s", "release_skew_s", "compute_median_s", "verify_s", "total_s")


async def run(work: Path, profile: str, nodes: int, rounds: int) -> list[dict[str, float]]:
    cfg_path, _ = write_configs(work, profile, [f"n{i}" for i in range(nodes)])
    cfg = load_coordinator_config(cfg_path)
    prof = load_profile(profile)
    build_demo_references(cfg, profile, rounds * nodes * prof.canaries_max)
    procs = Processes(work)
    try:
        procs.start("coordinator", "coordinator", "serve", "--config", str(cfg_path))
        for i in range(nodes):
            procs.start(f"n{i}", "node", "run", "--config", str(work / f"n{i}.toml"))
        await wait_nodes(cfg, procs, nodes, timeout_s=300)
        out = []
        for _ in range(rounds):
            report = await admin_request(cfg, "POST", "/admin/rounds", {"profile": profile})
            bad = [v for v in report["verdicts"] if v["verdict"] != "pass"]
            if bad:
                print(f"warning: {len(bad)} non-pass verdicts: {bad[0]['reason']}")
            out.append(report["phases"])
        return out
    finally:
        procs.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="cpu-tiny")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="netcheck-bench-round-") as tmp:
        phases = asyncio.run(run(Path(tmp), args.profile, args.nodes, args.rounds))
    print(f"\n{args.profile}: {args.nodes} real node processes, {args.rounds} rounds "
          f"({time.monotonic() - t0:.0f} s including start-up)")  # fmt: skip
    print(f"{'phase':<18}{'median ms':>12}{'max ms':>12}")
    for name in PHASES:
        values = [p[name] * 1000 for p in phases]
        print(f"{name:<18}{statistics.median(values):>12.2f}{max(values):>12.2f}")


if __name__ == "__main__":
    main()
