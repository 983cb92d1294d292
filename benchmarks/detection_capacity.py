"""Benchmark (issue 13, G4): the capacity test against the fixed-count rule before it, on
EMULATED populations, in the same runs.

Two parts:

1. **Same-run comparison** (default): scenarios of ``benchmarks/detection.py`` (farm
   scenarios by exact name with ``--scenario``, the false-flag scenarios with
   ``--ff SIGMA``) run through :class:`netcheck.lab.sim.live.LiveSimulation` with the
   current defaults (the capacity test: :mod:`netcheck.analysis.lateness`). Every
   simulated verdict also feeds the fixed-count rule before it (3 late/missing among the
   last 8 verdicts, :data:`~netcheck.lab.sim.live.LEGACY_CAPACITY`); capacity flags feed
   nothing else, so both rules see the same rounds, the same confirmations and the same
   seeds. Rows are those of ``detection.py`` (same seeding, same ``score``): config
   ``new`` = the capacity test, ``capL`` = the same run scored with the fixed-count
   rule's capacity flags; ``detection.py --from-json`` merges them. Extra columns:
   ``cap k`` = farms with a capacity-flagged identity (capacity alone).
2. **Rates** (``--rates N``): the honest capacity-flag rate per node-round of both rules
   over many more node-rounds than the false-flag scenario holds: verdicts only (no
   analysis, no confirmation rounds: the capacity check reads verdicts only), ``N``
   populations of the false-flag scenario (100 honest nodes, 30 co-hosted pairs at 20%)
   at sigma_w 0.05 and 0.15, ``--rounds`` rounds each (every 4th a full round, else a
   fair coin per node), the deadline calibrated as in ``LiveSimulation``.

Run: ``.venv/bin/python benchmarks/detection_capacity.py --scenario jitter --seeds 2
[--first-seed S] [--json PATH]``, ``--ff 0.15 --seeds 63 --first-seed 63``,
``--rates 2000 [--rounds 512]``, ``--from-json A.json B.json`` (table over split runs).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import detection as det  # noqa: E402

from netcheck.analysis.lateness import STRIKES, CapacityTestConfig, capacity_test  # noqa: E402
from netcheck.analysis.screening import capacity_check  # noqa: E402
from netcheck.lab.sim.live import LEGACY_CAPACITY, LiveConfig, LiveSimulation, sim_profile  # noqa: E402
from netcheck.lab.sim.population import PopulationSpec, make_population  # noqa: E402

COUNTS = ("FF", "mixed", "capH", "slH", "an")
RATES = ["HS", "conf"] + [f"{w}{k}" for k in det.SIZES for w in ("found", "caught", "c0", "cap")]


def capacity_only(pop: Any, flagged: frozenset[str]) -> dict[str, list[bool]]:
    """Per farm size: farms with an identity in ``flagged``."""
    out: dict[str, list[bool]] = {}
    for k in det.SIZES:
        out[f"cap{k}"] = [bool(set(f) & flagged) for f in pop.farms if len(f) == k]
    return out


def run(
    sc: det.Scenario, seeds: int, first_seed: int, cfg: LiveConfig | None = None
) -> list[dict[str, Any]]:
    """``seeds`` runs of ``sc`` (seeded as ``detection.run_scenario``): rows of config
    ``new`` (the capacity test; ``cfg``, default :class:`LiveConfig`) and ``capL`` (the
    fixed-count rule, same runs)."""
    per: dict[str, dict[int, list[dict[str, Any]]]] = {
        c: {r: [] for r in det.ROUNDS} for c in ("new", "capL")
    }
    for seed in range(first_seed, first_seed + seeds):
        pop = make_population(sc.spec, np.random.default_rng([seed, 1]))
        sim = LiveSimulation(pop, cfg or LiveConfig(), np.random.default_rng([seed, 2]),
                             secret=bytes([seed]) * 32)  # fmt: skip
        for snap in sim.run(det.ROUNDS):
            legacy = replace(snap, capacity=snap.capacity_legacy)
            for config, s in (("new", snap), ("capL", legacy)):
                per[config][snap.rounds].append(det.score(pop, s) | capacity_only(pop, s.capacity))
    rows = []
    for config, per_r in per.items():
        for r, runs in per_r.items():
            row: dict[str, Any] = {"scenario": sc.name, "config": config, "rounds": r,
                                   "seeds": seeds}  # fmt: skip
            for key in COUNTS:
                row[key] = int(sum(x[key] for x in runs))
            row["HS"] = float(np.mean([x["HS"] for x in runs]))
            row["conf"] = float(np.mean([x["conf"] for x in runs]))
            for k in det.SIZES:
                for what in ("found", "caught", "c0", "cap"):
                    hits = [h for x in runs for h in x[f"{what}{k}"]]
                    row[f"{what}{k}"] = float(np.mean(hits)) if hits else math.nan
            rows.append(row)
    return rows


def merge(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of one (scenario, config, rounds) over split seeds, as one
    (:func:`detection.merge_rows` with this benchmark's columns)."""
    return det.merge_rows(rows, COUNTS, RATES)


def table(rows: list[dict[str, Any]]) -> str:
    """The capacity test (new) beside the fixed-count rule (capL), per scenario and R."""
    by = {(r["scenario"], r["config"], r["rounds"]): r for r in rows}
    names = list(dict.fromkeys(r["scenario"] for r in rows))
    head = (f"{'scenario':<34} {'R':>4} | {'caught k=2/3/5 new':>20} | {'capL':>16} | "
            f"{'cap-only new':>16} | {'capL':>16} | {'capH new':>8} {'capL':>5} {'an':>5} "
            f"{'seeds':>5}")  # fmt: skip
    lines = [head, "-" * len(head)]

    def k3(r: dict[str, Any], what: str) -> str:
        return "/".join("  - " if r[f"{what}{k}"] != r[f"{what}{k}"] else f"{r[f'{what}{k}']:.2f}"
                        for k in det.SIZES)  # fmt: skip

    for name in names:
        for rr in det.ROUNDS:
            n, o = by.get((name, "new", rr)), by.get((name, "capL", rr))
            if n is None or o is None:
                continue
            lines.append(f"{name:<34} {rr:>4} | {k3(n, 'caught'):>20} | {k3(o, 'caught'):>16} | "
                         f"{k3(n, 'cap'):>16} | {k3(o, 'cap'):>16} | {n['capH']:>8} "
                         f"{o['capH']:>5} {n['an']:>5} {n['seeds']:>5}")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def verdict_histories(
    spec: PopulationSpec, seed: int, rounds: int, q: float = 0.5
) -> list[list[str]]:
    """EMULATION: each node's verdicts (oldest first) over ``rounds`` rounds of the live
    round mix (every 4th full, else a coin of probability ``q`` per node), no
    confirmation rounds."""
    pop = make_population(spec, np.random.default_rng([seed, 11]))
    rng = np.random.default_rng([seed, 12])
    prof = sim_profile(pop, rng, deadline_rule="legacy")  # as measured in session 9
    n = len(pop.node_keys)
    deadline = np.array([prof.deadline_s(float(r)) for r in pop.rtt_s])
    out: list[list[str]] = [[] for _ in range(n)]
    for r in range(rounds):
        bits = np.ones(n, bool) if r % 4 == 3 else rng.random(n) < q
        s = pop.service_times(bits, rng)
        elapsed = s + pop.rtt_s + rng.exponential(pop.spec.rtt_jitter_s, n)
        for i in np.flatnonzero(bits):
            out[i].append("missing" if math.isnan(s[i]) else
                          ("late" if elapsed[i] > deadline[i] else "pass"))  # fmt: skip
    return out


def flagged_by(hist: list[str], cfg: CapacityTestConfig) -> tuple[bool, bool]:
    """(capacity test, fixed-count rule): ever flagged over ``hist``, checked at every
    strike as the coordinator does."""
    recent: list[dict[str, str]] = []
    strikes, test, legacy = 0, False, False
    window, need = LEGACY_CAPACITY
    for i, v in enumerate(hist):
        recent.insert(0, {"round_id": str(i), "verdict": v})
        if v not in STRIKES:
            continue
        strikes += 1
        test = test or capacity_test(recent[: cfg.window], strikes, cfg).flagged
        legacy = legacy or capacity_check(recent, window, need)[1]
    return test, legacy


def rates(pops: int, rounds: int, cfg: CapacityTestConfig) -> None:
    """Honest capacity flags per node-round of both rules (part 2 of the docstring)."""
    print(f"EMULATION — honest capacity-flag rates, {pops} populations x 100 nodes x "
          f"{rounds} rounds per sigma_w (verdicts only; test: window {cfg.window}, p0 "
          f"{cfg.p0}, alpha {cfg.alpha}; before: {LEGACY_CAPACITY[1]} of "
          f"{LEGACY_CAPACITY[0]})")  # fmt: skip
    for sigma in (0.05, 0.15):
        spec = det.false_flag_scenario(sigma).spec
        t0 = time.perf_counter()
        new = old = nodes = verdicts = 0
        for seed in range(pops):
            for hist in verdict_histories(spec, seed, rounds):
                nodes += 1
                verdicts += len(hist)
                if sum(v in STRIKES for v in hist) < 3:
                    continue
                a, b = flagged_by(hist, cfg)
                new, old = new + a, old + b
        nr = nodes * rounds
        for label, f in (("capacity test", new), ("3 of 8 (before)", old)):
            hi = stats.chi2.ppf(0.95, 2 * (f + 1)) / 2 / nr  # one-sided 95% Poisson bound
            print(f"  sigma_w {sigma}: {label:<16} {f:>4} honest nodes flagged over {nodes} "
                  f"nodes, {nr} node-rounds ({verdicts} verdicts): {f / nr:.2e} per "
                  f"node-round (95% upper bound {hi:.1e}); per 125 runs of 128 rounds "
                  f"{f / nr * 125 * 100 * 128:.2f}")  # fmt: skip
        print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)


def main() -> int:
    """Parse arguments and run one of the parts."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--scenario", action="append", default=[], metavar="NAME",
                   help="a scenario of detection.py by exact name (repeatable)")  # fmt: skip
    p.add_argument("--ff", action="append", default=[], type=float, metavar="SIGMA",
                   help="the false-flag scenario at this sigma_w (repeatable)")  # fmt: skip
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--rates", type=int, default=0, metavar="N", help="part 2: N populations")
    p.add_argument("--rounds", type=int, default=512, help="rounds per population (--rates)")
    p.add_argument("--window", type=int, default=None, help="capacity_window (default: config)")
    p.add_argument("--p0", type=float, default=None, help="capacity_p0 (default: config)")
    p.add_argument("--alpha", type=float, default=None, help="capacity_alpha (default: config)")
    p.add_argument("--json", dest="json_path", default=None)
    p.add_argument("--from-json", nargs="+", default=None, metavar="PATH")
    args = p.parse_args()
    over = {f"capacity_{k}": v for k in ("window", "p0", "alpha")
            if (v := getattr(args, k)) is not None}  # fmt: skip
    live = replace(LiveConfig(), **over)
    if args.rates:
        rates(
            args.rates,
            args.rounds,
            CapacityTestConfig(
                live.capacity_window, live.capacity_strikes, live.capacity_p0, live.capacity_alpha
            ),
        )
        return 0
    rows: list[dict[str, Any]] = []
    if args.from_json:
        for path in args.from_json:
            with open(path) as fh:
                rows += json.load(fh)
        print(table(merge(rows)))
        return 0
    known = {s.name: s for s in det.scenarios()}
    unknown = [n for n in args.scenario if n not in known]
    if unknown:
        p.error(f"unknown scenario(s) {unknown}; known: {sorted(known)}")
    scs = [known[n] for n in args.scenario] + [det.false_flag_scenario(s) for s in args.ff]
    start = time.perf_counter()
    for sc in scs:
        rows += run(sc, args.seeds, args.first_seed, live)
        print(f"  {sc.name} done ({time.perf_counter() - start:.0f} s)", file=sys.stderr,
              flush=True)  # fmt: skip
    print(f"EMULATION — capacity test (new: window {live.capacity_window}, p0 "
          f"{live.capacity_p0}, alpha {live.capacity_alpha}) vs 3 of 8 (capL), same runs, "
          f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}")  # fmt: skip
    print(table(rows))
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
