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
from netcheck.lab.sim.live_config import DeadlineRule, sim_profile  # noqa: E402
from netcheck.lab.sim.population import PopulationSpec, make_population  # noqa: E402


def class_gate(
    spec: PopulationSpec, rule: DeadlineRule, seed: int = 0
) -> tuple[float, float, bool]:
    """The profile the product's calibration ``rule`` would give the class of ``spec``
    (population drawn with ``seed``, the profile with ``seed + 1``), with t(1) = t_ref
    and t(2) = (1 + beta) t_ref: ``(D(max_rtt) / t_ref, capacity margin, gate accepts)``."""
    pop = make_population(spec, np.random.default_rng(seed))
    prof = sim_profile(pop, np.random.default_rng(seed + 1), deadline_rule=rule)
    t1 = spec.t_ref_s
    cap = CapacityRecord(t_s=[t1, (1 + spec.beta) * t1], beta=[spec.beta], margin=1.0,
                         card="simulated class", date="-")  # fmt: skip
    status = capacity_status(prof.model_copy(update={"capacity": cap}))
    return prof.deadline_s(prof.deadline.max_rtt_s) / t1, status.margin or 0.0, status.safe


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
        for rule in ("card", "derived"):
            d, margin, safe = class_gate(spec, rule, args.seed)  # type: ignore[arg-type]
            gate = "accepted" if safe else "REFUSED"
            print(f"{sc.name:<28} {spec.sigma_w:>7.2f} {spec.beta:>5.2f} | {rule:<8} {d:>7.2f} "
                  f"{margin:>6.2f}  {gate}")  # fmt: skip


if __name__ == "__main__":
    main()
