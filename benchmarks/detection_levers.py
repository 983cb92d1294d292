"""Benchmark (issue 13, G1): two levers on the nomination of farm pairs, on EMULATED
populations through the live detection loop (:mod:`netcheck.lab.sim.live`), each alone
and together; session 8 made both the coordinator's defaults from this measurement
(docs/detection-history.md, "Session 8").

By 32 rounds the farm pairs still missed in the G1 cells were never *suspected*: their
mutual z after 24 screening rounds sits just under the Benjamini-Hochberg level of the
nomination (session 7: z 3.38 and 3.42 against 3.50). Two ways to nominate more of them:

- ``fdr50`` / ``fdr75``: nominate at a looser false discovery rate
  (``DetectorConfig.mutual_fdr`` 0.5 / 0.75 instead of session 7's 0.25). Screening only nominates,
  confirmation's own level bounds false flags; the price is confirmation rounds spent
  on honest suspects.
- ``p23``: load each node in a screening round with probability 2/3 instead of 1/2
  (``CoordinatorConfig.screening_load_probability``; the schedule's HMAC read as a
  uniform 64-bit number, :mod:`netcheck.analysis.schedule`). A direction's contrast
  (partner loaded vs not, given the node loaded) has variance proportional to
  ``1 / (q^2 (1 - q))``, smallest at q = 2/3: z about 9% higher per screening round,
  for a third more loaded nodes (work and canaries) per round.
- ``p23fdr75``: both (the defaults since session 8); ``s7``: neither (session 7).

Printed per config (same populations and random streams for every config): farms of 2
found (confirmed ``shared-backend`` flag holding both) by 16 and 32 rounds in each G1
grid cell, the mean confirmation rounds by 32, honest suspects per analysis (HS), and
over the honest-only populations (30 co-hosted pairs coupled 20%, sigma_w 0.05 and 0.15,
128 rounds) the honest nodes in any flag and the analyses run (goal G4).

Run: ``.venv/bin/python benchmarks/detection_levers.py [--seeds 16] [--ff-seeds 16]
[--big-seeds N] [--jobs N] [--configs s7,fdr75,...] [--cells REGEX]`` (one process per scenario,
config and seed; on the device's 16 cores the default run takes about 5 minutes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import detection as d  # noqa: E402  (benchmarks/detection.py: scenarios, score)

from netcheck.analysis.detector_config import DetectorConfig  # noqa: E402
from netcheck.lab.sim.live import LiveConfig, LiveSimulation  # noqa: E402
from netcheck.lab.sim.population import make_population  # noqa: E402

#: config -> (mutual_fdr, load probability)
LEVERS: dict[str, tuple[float, float]] = {
    "s7": (0.25, 0.5),
    "fdr50": (0.5, 0.5),
    "fdr75": (0.75, 0.5),
    "p23": (0.25, 2 / 3),
    "p23fdr75": (0.75, 2 / 3),
}
BASE = "s7"


def job(args: tuple[str, str, int, tuple[int, ...]]) -> dict[Any, Any]:
    """One (scenario, config, seed): the score at each checkpoint."""
    name, config, seed, rounds = args
    fdr, q = LEVERS[config]
    scs = {s.name: s for s in d.scenarios()}
    for sigma in (0.05, 0.15):
        sc = d.false_flag_scenario(sigma)
        scs[sc.name] = sc
    sc = scs[name]
    pop = make_population(sc.spec, np.random.default_rng([seed, 1]))
    cfg = LiveConfig(load_probability=q, detector=DetectorConfig(mutual_fdr=fdr))
    sim = LiveSimulation(pop, cfg, np.random.default_rng([seed, 2]), secret=d.seed_secret(seed))
    out: dict[Any, Any] = {"scenario": name, "config": config, "seed": seed}
    for snap in sim.run(rounds):
        s = d.score(pop, snap)
        honest_flagged = len(
            ({k for fl in snap.shared_flags for k in fl} | snap.capacity | snap.slow) & pop.honest
        )
        out[snap.rounds] = {"found2": s["found2"], "conf": s["conf"], "HS": s["HS"],
                            "honest": honest_flagged, "an": s["an"]}  # fmt: skip
    return out


def main() -> int:
    """Run every (cell, config, seed) in parallel; print the table and ratios to ``s7``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=16, help="seeds per G1 cell")
    parser.add_argument(
        "--big-seeds",
        type=int,
        default=None,
        help="seeds of the 1,000-node cells (default: --seeds)",
    )
    parser.add_argument("--ff-seeds", type=int, default=16, help="seeds per honest population")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--configs", default=",".join(LEVERS), help="comma-separated")
    parser.add_argument("--cells", default=".", help="regex on G1 cell names")
    parser.add_argument("--jsonl", help="append each job's result to this file as it ends")
    parser.add_argument("--from-jsonl", help="print the table of a saved (partial) run")
    args = parser.parse_args()
    configs = [c for c in args.configs.split(",") if c]
    cells = [s.name for s in d.scenarios() if s.grid and re.search(args.cells, s.name)]
    ff = [d.false_flag_scenario(s).name for s in (0.05, 0.15)] if args.ff_seeds else []
    big = args.seeds if args.big_seeds is None else args.big_seeds
    tasks: list[tuple[str, str, int, tuple[int, ...]]] = [(c, k, s, (16, 32)) for c in cells for k in configs
             for s in range(big if "n=1000" in c else args.seeds)]  # fmt: skip
    tasks += [(c, k, s, (128,)) for c in ff for k in configs for s in range(args.ff_seeds)]
    tasks.sort(key=lambda t: ("n=1000" not in t[0], t[0] not in ff))  # longest first
    start = time.perf_counter()
    print(f"EMULATION - candidate nomination levers, {len(tasks)} jobs on {args.jobs} processes")
    res: list[dict[Any, Any]] = []
    if args.from_jsonl:
        with open(args.from_jsonl) as f:
            res = [{(int(k) if k.isdigit() else k): v for k, v in json.loads(line).items()}
                   for line in f]  # fmt: skip
        done = {(r["scenario"], r["config"]) for r in res}
        cells = [c for c in cells if any((c, k) in done for k in configs)]
        ff = [c for c in ff if any((c, k) in done for k in configs)]
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            for r in pool.map(job, tasks):
                res.append(r)
                if args.jsonl:
                    with open(args.jsonl, "a") as f:
                        f.write(json.dumps({str(k): v for k, v in r.items()}) + "\n")
    by: dict[tuple[str, str], list[dict[Any, Any]]] = {}
    for r in res:
        by.setdefault((r["scenario"], r["config"]), []).append(r)

    def mean(xs: list[float]) -> float:
        return float(np.mean(xs)) if xs else math.nan

    print(f"\nfarms of 2 found by 16 / 32 rounds (confirmation rounds by 32, honest suspects "
          f"per analysis), {args.seeds} seeds per cell ({big} at n=1000)")  # fmt: skip
    print(f"{'cell':<28} " + " ".join(f"{c:>26}" for c in configs))
    for cell in cells:
        line = []
        for c in configs:
            rs = by.get((cell, c), [])
            f16 = mean([h for r in rs for h in r[16]["found2"]])
            f32 = mean([h for r in rs for h in r[32]["found2"]])
            conf, hs = mean([r[32]["conf"] for r in rs]), mean([r[32]["HS"] for r in rs])
            line.append(f"{f16:.2f} / {f32:.2f} ({conf:6.0f}, {hs:4.1f})")
        print(f"{cell:<28} " + " ".join(f"{x:>26}" for x in line))
    for cell in ff:
        line = []
        for c in configs:
            rs = by.get((cell, c), [])
            honest = sum(r[128]["honest"] for r in rs)
            an = sum(r[128]["an"] for r in rs)
            conf = mean([r[128]["conf"] for r in rs])
            line.append(f"{honest} flagged / {an} an. ({conf:.0f})")
        print(f"{cell:<28} " + " ".join(f"{x:>26}" for x in line))
    base = {cell: mean([h for r in by[(cell, BASE)] for h in r[32]["found2"]])
            for cell in cells} if BASE in configs else {}  # fmt: skip
    for c in configs:
        if c == BASE or not base:
            continue
        gains = [mean([h for r in by[(cell, c)] for h in r[32]["found2"]]) - base[cell]
                 for cell in cells]  # fmt: skip
        ratios = [mean([r[32]["conf"] for r in by[(cell, c)]])
                / max(1.0, mean([r[32]["conf"] for r in by[(cell, BASE)]])) for cell in cells]  # fmt: skip
        print(
            f"{c}: found by 32 {min(gains):+.2f}..{max(gains):+.2f} vs {BASE}; "
            f"confirmation rounds x{min(ratios):.2f}..x{max(ratios):.2f}"
        )
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
