"""EMULATION: the capacity test's honest tail against ``capacity_p0`` (session 9).

The capacity test's level argument covers nodes late in at most ``p0`` of their rounds
(docs/detection.md, "Capacity test"). With timing noise sigma_w 0.15 and benign
coupling 20%, a few honest co-hosted cards are late more often than 2% (helper cal9),
so G4 rests on a small expected rate of honest capacity flags. This benchmark counts
them from verdicts alone: the benchmark's false-flag population (100 honest nodes, 30
co-hosted pairs at 20%), the live round mix (every 4th round full, the others HMAC-like
coins at ``q``), each node's verdicts at the simulator's calibrated deadline, and the
capacity test run at every strike as the coordinator runs it
(:func:`benchmarks.detection_capacity.flagged_by`). No confirmation rounds (they add
timed verdicts, so the real rate is a little higher).

Prints, per ``p0``: honest nodes flagged, the share of them co-hosted, and the expected
flags per 1,000 analyses (125 runs of 128 rounds, one analysis per 16 rounds).

Run: ``.venv/bin/python benchmarks/capacity_tail.py --pops 1500 --rounds 512 --sigma 0.15
--p0 0.02 0.03 0.04 [--jobs N]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import detection as det  # noqa: E402
import detection_capacity as dc  # noqa: E402

from netcheck.analysis.lateness import STRIKES, CapacityTestConfig  # noqa: E402
from netcheck.lab.sim.population import make_population  # noqa: E402


def histories(sigma: float, seed: int, rounds: int, q: float) -> tuple[list[list[str]], list[bool]]:
    """Every node's verdicts over ``rounds`` rounds of the live mix
    (:func:`detection_capacity.verdict_histories`), and whether it is co-hosted."""
    spec = det.false_flag_scenario(sigma).spec
    hs = dc.verdict_histories(spec, seed, rounds, q)
    pop = make_population(spec, np.random.default_rng([seed, 11]))  # the same population
    return hs, [bool(pop.cohost_of[i] >= 0) for i in range(len(pop.node_keys))]


def one_seed(args: tuple[float, int, int, float, tuple[float, ...]]) -> list[tuple[int, int]]:
    """``(flagged, co-hosted flagged)`` per ``p0`` for one population."""
    sigma, seed, rounds, q, p0s = args
    hs, cohost = histories(sigma, seed, rounds, q)
    out = []
    for p0 in p0s:
        cfg = CapacityTestConfig(p0=p0, load_probability=q)
        f = c = 0
        for h, co in zip(hs, cohost, strict=True):
            if sum(v in STRIKES for v in h) >= cfg.min_strikes and dc.flagged_by(h, cfg)[0]:
                f += 1
                c += co
        out.append((f, c))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pops", type=int, default=200, help="populations (100 nodes each)")
    ap.add_argument("--rounds", type=int, default=512)
    ap.add_argument("--sigma", type=float, default=0.15, help="timing noise sigma_w")
    ap.add_argument("--q", type=float, default=0.5, help="screening load probability")
    ap.add_argument("--p0", type=float, nargs="+", default=[0.02, 0.03, 0.04])
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args(argv)
    t0 = time.time()
    tasks = [(a.sigma, s, a.rounds, a.q, tuple(a.p0)) for s in range(a.pops)]
    with ProcessPoolExecutor(a.jobs) as ex:
        rows = list(ex.map(one_seed, tasks, chunksize=8))
    nodes = a.pops * 100
    print(f"EMULATION: {a.pops} false-flag populations x 100 honest nodes x {a.rounds} rounds, "
          f"sigma_w {a.sigma}, q {a.q:.3f} ({time.time() - t0:.0f} s)")  # fmt: skip
    for k, p0 in enumerate(a.p0):
        f = sum(r[k][0] for r in rows)
        c = sum(r[k][1] for r in rows)
        per_1000 = f / (nodes * a.rounds) * 100 * 128 * 125
        print(f"p0 {p0:.3f}: {f} honest nodes flagged ({c} co-hosted); "
              f"{per_1000:.2f} expected per 1,000 analyses")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
