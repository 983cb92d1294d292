"""Benchmark: one confirmation attempt of a pair, isolated from screening (EMULATION).

What it measures: the power and the cost of a single
:class:`~netcheck.analysis.confirm_run.ConfirmationRun` (attempt 1, nothing pooled) on
the pairs of a :mod:`benchmarks.detection` scenario's simulated population (rounds
simulated and read as stored rows, :func:`netcheck.lab.sim.pipeline.confirm_members`),
for the look-spending rules and caps of the confirmation design (docs/detection.md
"Confirmation"; docs/detection-history.md "Session 7"): ``equal`` = each look at
``1 / looks`` of the level (the default), ``information`` = each look at the share of the cycles it adds (measured,
not the default); cap 128 (sessions 5-6) or 256 cycles (session 7). The full benchmark (``benchmarks/detection.py``) measures
these through the whole loop, where one different confirmation changes every random
draw after it, so its cells differ by a pair or two at random; this one runs every
variant on the same pairs with the same random stream per pair and variant, so the
differences are the rules'.

Pairs: ``farm`` = every farm of 2 (the pass rate is the power), ``honest`` = every
honest co-hosted pair (the pass rate is the false-flag rate, rounds are the cost an
operator's own coupled pairs impose; ``--coupling`` overrides the scenario's benign
coupling, e.g. 0.25 = exactly at the effect floor).

Run: ``.venv/bin/python benchmarks/confirm_power.py --scenario "plain n=200 s=0.05 b=0.3"
--seeds 20`` (about 30 s). Prints pass rate and mean rounds per variant, and ratios to
the baseline ``equal/128`` measured in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import detection  # noqa: E402  (the scenarios of the full benchmark)

from netcheck.analysis.confirm import ConfirmConfig  # noqa: E402
from netcheck.lab.sim.pipeline import PipelineConfig, confirm_members  # noqa: E402
from netcheck.lab.sim.population import Population, make_population  # noqa: E402

VARIANTS: dict[str, tuple[ConfirmConfig, int]] = {
    "equal/128": (ConfirmConfig(look_spending="equal"), 128),  # sessions 5-6 (baseline)
    "information/128": (ConfirmConfig(look_spending="information"), 128),
    "equal/256": (ConfirmConfig(look_spending="equal"), 256),  # session 7 default
    "information/256": (ConfirmConfig(look_spending="information"), 256),
}


def one_run(
    pop: Population, pair: tuple[str, str], cfg: ConfirmConfig, cap: int, rng: np.random.Generator
) -> tuple[bool, int]:
    """One attempt on ``pair`` (:func:`~netcheck.lab.sim.pipeline.confirm_members`, 8
    cycles before the first look, cap ``cap``): (flagged, rounds run)."""
    pipe = PipelineConfig(confirm=cfg, confirm_cycles=8, confirm_max_cycles=cap)
    run, rounds = confirm_members(pop, pair, pipe, rng, pipe.deadline_factor * pop.spec.t_ref_s)
    return bool(run.flags), rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="plain n=200 s=0.05 b=0.3",
                    help="a scenario name of benchmarks/detection.py")  # fmt: skip
    ap.add_argument("--seeds", type=int, default=20, help="populations drawn")
    ap.add_argument("--pairs", choices=("farm", "honest"), default="farm")
    ap.add_argument("--coupling", type=float, default=None,
                    help="benign coupling of honest co-hosted pairs (default: the scenario's)")  # fmt: skip
    args = ap.parse_args()
    sc = next((s for s in detection.scenarios() if s.name == args.scenario), None)
    if sc is None:
        ap.error(f"no scenario {args.scenario!r}; see benchmarks/detection.py --help")
    spec = sc.spec
    if args.coupling is not None:
        spec = dataclasses.replace(spec, benign_coupling=args.coupling)
    start = time.perf_counter()
    results: dict[str, list[tuple[bool, int]]] = {v: [] for v in VARIANTS}
    for seed in range(args.seeds):
        pop = make_population(spec, np.random.default_rng([seed, 1]))
        pairs = (
            [tuple(f) for f in pop.farms if len(f) == 2] if args.pairs == "farm" else pop.cohosted()
        )
        for v, (cfg, cap) in VARIANTS.items():
            rng = np.random.default_rng([seed, 7])  # the same stream for every variant
            results[v] += [one_run(pop, (a, b), cfg, cap, rng) for a, b in pairs]
    print(f"EMULATION: one confirmation attempt per pair, scenario {sc.name!r}, {args.pairs} "
          f"pairs, {args.seeds} populations"
          + (f", coupling {args.coupling}" if args.coupling is not None else ""))  # fmt: skip
    base_pass = float(np.mean([f for f, _ in results["equal/128"]]))
    base_rounds = float(np.mean([n for _, n in results["equal/128"]]))
    print(
        f"{'variant':<16} {'pairs':>5} {'flagged':>8} {'rounds':>8} {'x rounds':>9} {'d flagged':>10}"
    )
    for v, res in results.items():
        flagged = float(np.mean([f for f, _ in res]))
        rounds = float(np.mean([n for _, n in res]))
        print(f"{v:<16} {len(res):>5} {flagged:>8.3f} {rounds:>8.1f} "
              f"{rounds / base_rounds:>9.2f} {flagged - base_pass:>+10.3f}")  # fmt: skip
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
