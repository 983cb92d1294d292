"""Which simulated classes could ship as a safe profile? (issue 13, goal G2's scope)

G2 asks that every farm on a backend *of the claimed class* be caught by 32 rounds. A
backend of the class with co-load slowdown beta takes t(2) = (1 + beta) t(1) for two
identities' batches. The product only screens with a profile whose **capacity margin**
t(2) / D(max_rtt) is at least 1.2 (:func:`netcheck.capacity.capacity_status`;
``screen run`` refuses the others: "this profile cannot tell two identities on one card
apart"). This script builds, for every claimed-class scenario of
``benchmarks/detection.py``, the profile the product's own calibration would give that
class (:func:`netcheck.lab.sim.live_config.sim_profile`, rules ``card``: one trusted
card, as ``netcheck engine calibrate`` does; ``derived``: the class's honest spread, the
simulator's default since session 13) with a ``[capacity]`` table t(1) = t_ref,
t(2) = (1 + beta) t_ref, and prints its margin and whether the capacity gate accepts it.
EMULATION (simulated classes; no GPU). Command:

    .venv/bin/python benchmarks/detection_scope.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from detection import scenarios  # noqa: E402

from netcheck.capacity import MIN_MARGIN, capacity_status  # noqa: E402
from netcheck.config import CapacityRecord  # noqa: E402
from netcheck.lab.sim.live_config import sim_profile  # noqa: E402
from netcheck.lab.sim.population import make_population  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(
        f"EMULATION: capacity margin t(2)/D(max_rtt) of each class's profile; safe >= {MIN_MARGIN}"
    )
    print(
        f"{'scenario':<28} {'sigma_w':>7} {'beta':>5} | {'rule':<8} {'D/t_ref':>7} {'margin':>6}  gate"
    )
    seen = set()
    for sc in scenarios():
        spec = sc.spec
        key = (spec.sigma_w, spec.beta)
        if not sc.claimed_class or not spec.farm_sizes or key in seen:
            continue
        seen.add(key)
        pop = make_population(spec, np.random.default_rng(args.seed))
        for rule in ("card", "derived"):
            prof = sim_profile(pop, np.random.default_rng(args.seed + 1), deadline_rule=rule)  # type: ignore[arg-type]
            t1 = spec.t_ref_s
            cap = CapacityRecord(t_s=[t1, (1 + spec.beta) * t1], beta=[spec.beta], margin=1.0,
                                 card="simulated class", date="-")  # fmt: skip
            status = capacity_status(prof.model_copy(update={"capacity": cap}))
            d = prof.deadline_s(prof.deadline.max_rtt_s) / t1
            gate = "accepted" if status.safe else "REFUSED"
            print(f"{sc.name:<28} {spec.sigma_w:>7.2f} {spec.beta:>5.2f} | {rule:<8} {d:>7.2f} "
                  f"{status.margin or 0:>6.2f}  {gate}")  # fmt: skip


if __name__ == "__main__":
    main()
