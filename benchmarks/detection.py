"""Benchmark (issue 5): recall of proxy farms and false flags, on EMULATED populations.

Population (netcheck.lab.sim.population defaults): 200 identities = 8 farms of 2, 6 of 3
and 4 of 5 (54 farm identities) + 146 honest nodes, 10 honest pairs co-hosted with 3%
benign coupling; per-node speed spread 5% (log-sd), per-node noise level log-normal
around sigma_w (spread 0.3), per-round common effect 2%. Each seed draws a population
and 128 screening rounds under a fresh secret schedule; 16/32/64/128 use prefixes of
the same rounds. Suspect groups get sequential confirmation rounds (simulated on the
same population).

Columns: k=2/k=3/k=5 = farms found (a confirmed group holds 2+ confirmed members of
the farm), mean over seeds, as a fraction; "scr" the same before confirmation;
members = farm identities confirmed with a farm-mate; FF = confirmed false flags
among honest nodes, total over seeds; HS = honest nodes in suspect groups (before
confirmation), mean; conf = confirmation rounds spent, mean; cap = farms with an
identity failing the emulated capacity deadline (1.25 T_ref, full-load rounds), mean.

Methods: "fs+B" = Detector A (forward selection, moderated t, group steps of 2-4
partners, reverse tests of one-way selections) + Detector B (residual correlation),
the default; "fs1+B" = ablation without group steps and reverse tests (close to the
previous default: single-partner steps, mutual edges); "welch" = baseline: plain pairwise Welch t, mutual edges,
same Bonferroni bound and effect floor, no selection, no Detector B.

Run: ``.venv/bin/python benchmarks/detection.py [--seeds 5] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np

from netcheck.analysis.detectors import DetectorConfig
from netcheck.lab.sim.pipeline import PipelineConfig, run_screening, simulate_screening
from netcheck.lab.sim.population import PopulationSpec, make_population

ROUNDS = (16, 32, 64, 128)
SIZES = (2, 3, 5)
SCENARIOS: list[tuple[str, PopulationSpec]] = [
    ("sigma_w=0.05 beta=0.5", PopulationSpec()),
    ("sigma_w=0.15 beta=0.5", PopulationSpec(sigma_w=0.15)),
    ("sigma_w=0.05 beta=0.25", PopulationSpec(beta=0.25)),
    ("pad (matched backend)", PopulationSpec(adversary="pad")),
    ("pad (fast backend)", PopulationSpec(adversary="pad", farm_backend="fast")),
    ("jitter (log-sd 0.3)", PopulationSpec(adversary="jitter")),
    ("selective", PopulationSpec(adversary="selective")),
    ("no adversary, fast backend", PopulationSpec(farm_backend="fast")),
]
METHODS = {
    "fs+B": DetectorConfig(),
    "fs1+B": DetectorConfig(group_step=1, reverse_test=False),
    "welch": DetectorConfig(forward_selection=False, use_correlation=False),
}


def run(seeds: int, scenarios: list[tuple[str, PopulationSpec]]) -> list[dict[str, object]]:
    """All scenarios x methods x round counts, aggregated over seeds."""
    out = []
    for name, spec in scenarios:
        acc: dict[tuple[str, int], list[dict[str, float]]] = {}
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            pop = make_population(spec, rng)
            screening = simulate_screening(pop, max(ROUNDS), rng)
            for method, det in METHODS.items():
                cfg = replace(PipelineConfig(), detector=det)
                for n_rounds in ROUNDS:
                    crng = np.random.default_rng([seed, n_rounds, 7])
                    m = run_screening(pop, n_rounds, cfg, crng, screening=screening).metrics
                    row: dict[str, float] = {
                        "members": m.member_recall,
                        "false_flags": len(m.false_flags),
                        "honest_suspects": m.honest_suspects,
                        "confirm_rounds": m.confirmation_rounds,
                        "capacity_farms": m.capacity_farms,
                        "capacity_honest": m.capacity_honest,
                    }
                    for k in SIZES:
                        hit, total = m.found_by_size.get(k, (0, 0))
                        row[f"k{k}"] = hit / total if total else float("nan")
                        hit, total = m.screened_by_size.get(k, (0, 0))
                        row[f"scr{k}"] = hit / total if total else float("nan")
                    acc.setdefault((method, n_rounds), []).append(row)
        for (method, n_rounds), rows in acc.items():
            agg: dict[str, object] = {"scenario": name, "method": method, "rounds": n_rounds}
            for key in rows[0]:
                vals = [r[key] for r in rows]
                agg[key] = float(np.sum(vals)) if key == "false_flags" else float(np.mean(vals))
            agg["seeds"] = seeds
            out.append(agg)
    return out


def table(results: list[dict[str, object]]) -> str:
    """Format the results as a fixed-width text table."""
    head = (
        f"{'scenario':<27} {'method':<6} {'R':>4} | {'k=2':>5} {'k=3':>5} {'k=5':>5} | "
        f"{'scr2':>5} {'scr3':>5} {'scr5':>5} | {'members':>7} {'FF':>3} {'HS':>5} "
        f"{'conf':>6} {'cap':>5}"
    )
    lines = [head, "-" * len(head)]
    last = None
    for r in results:
        if last is not None and r["scenario"] != last:
            lines.append("")
        last = r["scenario"]
        lines.append(
            f"{r['scenario']!s:<27} {r['method']!s:<6} {r['rounds']!s:>4} | "
            f"{r['k2']:>5.2f} {r['k3']:>5.2f} {r['k5']:>5.2f} | "
            f"{r['scr2']:>5.2f} {r['scr3']:>5.2f} {r['scr5']:>5.2f} | "
            f"{r['members']:>7.2f} {r['false_flags']:>3.0f} {r['honest_suspects']:>5.1f} "
            f"{r['confirm_rounds']:>6.0f} {r['capacity_farms']:>5.1f}"
        )
    return "\n".join(lines)


def main() -> None:
    """Parse arguments, run, print the table (and write JSON if asked)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument("--quick", action="store_true", help="main scenario only")
    args = parser.parse_args()
    start = time.perf_counter()
    scenarios = SCENARIOS[:1] if args.quick else SCENARIOS
    results = run(args.seeds, scenarios)
    print(f"EMULATION — netcheck detection benchmark, {args.seeds} seeds, 200 nodes")
    print(table(results))
    print(f"\n({time.perf_counter() - start:.0f} s)")
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
