"""What the timing evidence can give at all: the power of the two tests for a farm pair
of each benchmark scenario, from the population model, not from a run (EMULATION).

For a pair of identities on one backend (``benchmarks/detection.py`` scenarios, farm
size 2) with log slowdown ``delta = log(1 + beta)`` when both are loaded, per-answer
log-noise sd ``s`` (``sigma_w``, the round effect ``round_sd`` and, for ``jitter``, the
variance of ``jitter_log_sd * |N(0, 1)|``, i.e. ``jitter_log_sd^2 (1 - 2 / pi)``):

- **Screening** (the mutual pair test, normal approximation): after R rounds, of which
  every ``screening_full_every``-th is a full round left out, each row has about R_s / 4
  rounds in each arm (both loaded / only this one), so each row's t is about
  ``delta / (s sqrt(8 / R_s))`` and the Stouffer sum of the two rows about ``sqrt(2)``
  times that. Nominated with probability ``P(N(z, 1) > z*)`` for the Bonferroni level
  over ``n (n - 1) / 2`` pairs and for the BH level seen in the runs (about z 3.45 at
  200 identities, 4.0 at 1,000; ``DetectorConfig.mutual_fdr``). The effect-floor
  conditions are left out (they cost jitter-free pairs little).
- **Confirmation** (Welch test of ``H0: effect <= floor`` per member, both members at
  the attempt's level split over its 5 looks): cycles needed for power 0.95 of the pair
  (0.975 per member), ``n = 2 s^2 (z_a + z_0.975)^2 / (delta - floor)^2``, and the
  rounds (3 per cycle).

Prints one row per scenario. These are optimistic approximations for an oracle that
knows the model and the pair, not measurements (the real test also pays for the random
arm sizes, t tails at ~20 df, the spread of node noise, the effect-floor conditions):
measured nomination by 32 rounds was 31 / 32 for ``jitter`` (bound 0.97) and 16 / 32 for
``jitter n=200 s=0.15`` (bound 0.78). Use them to tell a gap the code could close from
one the data cannot (a pair needing thousands of confirmation cycles).
Run: ``.venv/bin/python benchmarks/detection_bounds.py``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parent))

import detection  # noqa: E402

from netcheck.analysis.confirm import ConfirmConfig  # noqa: E402
from netcheck.analysis.confirm_run import spending_weight  # noqa: E402
from netcheck.analysis.detector_config import DetectorConfig  # noqa: E402
from netcheck.lab.sim.population import PopulationSpec  # noqa: E402

FLOOR = ConfirmConfig().effect_floor
BH_Z = {200: 3.45, 1000: 4.0, 100: 3.3}  # BH thresholds seen in the runs (z), by n


def bounds(
    spec: PopulationSpec, rounds: int, full_every: int = 4, looks: int = 5
) -> dict[str, float]:
    """The row of one scenario (module docstring)."""
    beta, n = spec.beta, spec.n_nodes
    var = spec.sigma_w**2 + spec.round_sd**2
    if "jitter" in spec.adversary:
        var += spec.jitter_log_sd**2 * (1 - 2 / math.pi)
    s, delta = math.sqrt(var), math.log1p(beta)
    r_s = rounds - rounds // full_every
    z = math.sqrt(2) * delta / (s * math.sqrt(8 / r_s))
    z_bonf = float(norm.isf(DetectorConfig().p_crit_mutual(n)))
    z_bh = BH_Z.get(n, z_bonf)
    level = ConfirmConfig().alpha * spending_weight(1) / looks
    margin = delta - FLOOR
    cycles = (
        2 * var * (norm.isf(level) + norm.isf(1 - math.sqrt(0.95))) ** 2 / margin**2
        if margin > 0
        else math.inf
    )
    return {
        "s": s, "margin": margin, "z": z,
        "p_bonf": float(norm.sf(z_bonf - z)), "p_bh": float(norm.sf(z_bh - z)),
        "cycles": cycles,
    }  # fmt: skip


def main() -> int:
    """Print the table for 16 and 32 rounds."""
    print("EMULATION (model bounds, no run) — farm pairs: screening nomination and "
          "confirmation cycles needed")  # fmt: skip
    head = (f"{'scenario':28s} {'s':>5s} {'margin':>6s} | {'E[z] 16':>7s} {'P bonf':>6s} "
            f"{'P BH':>5s} | {'E[z] 32':>7s} {'P bonf':>6s} {'P BH':>5s} | {'cycles':>7s} {'rounds':>7s}")  # fmt: skip
    print(head + "\n" + "-" * len(head))
    for sc in detection.scenarios():
        if sc.spec.adversary not in ("none", "jitter") or sc.spec.farm_backend != "matched":
            continue
        if sc.spec.backend_speedup != 1.0 or 2 not in sc.spec.farm_sizes:
            continue
        a, b = bounds(sc.spec, 16), bounds(sc.spec, 32)
        print(f"{sc.name:28s} {a['s']:5.3f} {a['margin']:6.3f} | {a['z']:7.2f} {a['p_bonf']:6.2f} "
              f"{a['p_bh']:5.2f} | {b['z']:7.2f} {b['p_bonf']:6.2f} {b['p_bh']:5.2f} | "
              f"{b['cycles']:7.0f} {3 * b['cycles']:7.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
