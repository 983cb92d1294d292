"""What the timing evidence can give at all: the nomination and confirmation of a farm
pair of each benchmark scenario, from the population model, not from a run (EMULATION).

A model estimate for an oracle that knows the model, the pair and every node's noise
level, at the coordinator's defaults (``CoordinatorConfig``: load probability ``q`` =
``screening_load_probability``, every ``screening_full_every``-th round full, an
analysis every ``screening_analyze_every`` rounds, ``confirm_cycles`` /
``confirm_max_cycles``; ``DetectorConfig``, ``ConfirmConfig``). Normal approximations,
numerical integration, no simulation.

Model (:mod:`netcheck.lab.sim.population`): node i's log service time has noise sd
``s_i`` with ``s_i^2 = sigma_i^2 + jitter_log_sd^2 (1 - 2 / pi)`` (the second term
for ``jitter`` farm identities only: the variance of ``jitter_log_sd |N(0, 1)|``),
``sigma_i = sigma_w exp(sigma_spread u_i)``, ``u_i ~ N(0, 1)`` (integrated over, Gauss-
Hermite); a farm identity is slowed by ``1 + beta (k_loaded - 1)``, an honest co-hosted
one by ``1 + benign_coupling`` when its partner is loaded.

- **Screening nomination** (the mutual pair test, :mod:`netcheck.analysis.mutual`): of
  R rounds, ``R_s = R - R // full_every`` are screening rounds (full rounds are left out
  of the analysis). Row i of pair (i, j) contrasts i's residuals in the rounds *i was
  observed* (i loaded) with j loaded against j not loaded: about ``q^2 R_s`` rounds
  both loaded and ``q (1 - q) R_s`` only i, so the effect estimate has variance
  ``s_i^2 (1 / (q^2 R_s) + 1 / (q (1 - q) R_s)) = s_i^2 / (q^2 (1 - q) R_s)``
  (8 ``s_i^2 / R_s`` at q = 1/2, 6.75 ``s_i^2 / R_s`` at 2/3). Its mean is
  ``delta = log(1 + beta)`` for a pair (in a farm of k, averaged over the other k - 2
  members' load bits, whose spread adds to the within-arm variance). ``z_i`` = effect /
  its sd (known variance); Stouffer ``Z = (z_i + z_j) / sqrt(2)``. Nominated when
  ``P(N(0, 1) > Z)`` is below the level **and** the effect floors hold (mean of the two
  effects above ``effect_floor``, each above half of it): integrated exactly over the
  two effect estimates, not left out (they cost beta 0.3 pairs much).
- **The level** (:func:`~netcheck.analysis.mutual.mutual_level`): the larger of the
  Bonferroni level ``alpha / (n (n - 1) / 2)`` (``P bonf``: the conservative end) and
  the Benjamini-Hochberg threshold at ``mutual_fdr`` over the ``m = n (n - 1) / 2``
  pairs, those that miss the floors entering with ``p = 1``. BH in expectation (mean
  field): the threshold is the largest t with ``D(t) >= m t / fdr``, ``D(t)`` the
  expected number of pairs with ``p < t`` that meet the floors. ``P BH1``: D counts
  only this pair and ``m - 1`` unrelated pairs of honest identities, i.e. for one true
  pair among m nulls the threshold ``t = fdr (1 + V) / m``, V the null discoveries
  (few: a null pair rarely meets the floors at sigma_w 0.05); ``P BHpop``:
  D counts the scenario's whole population (every farm's pairs, the honest co-hosted
  pairs at ``benign_coupling``, the unrelated pairs of honest and farm identities), the
  population the benchmark runs. ``z*``: the BHpop threshold as a normal deviate.
- **Confirmation** (:mod:`netcheck.analysis.confirm_run`): per cycle each member has
  one co-loaded and one alone round (3 rounds per cycle for a pair); a member passes
  when Welch's one-sided test of ``H0: effect <= effect_floor`` rejects at the look's
  level, a pair when both pass (intersection-union: each member at the attempt's
  level). The ``a``-th attempt gets ``alpha 6 / (pi^2 a^2)`` split equally over its
  looks (doubling from ``confirm_cycles`` to ``confirm_max_cycles``: 6 looks), and pools
  the earlier attempts' rounds. ``cycles``: cycles needed for power 0.95 of the pair at
  the first attempt's look level (median noise); more than ``confirm_max_cycles``
  means one attempt cannot do it. ``P conf``: the pair's power at the last look of the
  best attempt possible by R rounds (attempt ``a <= R / analyze_every`` with
  ``a * max_cycles`` pooled cycles, assuming it was nominated at every analysis).
- ``found <=``: ``(1 - prod_r (1 - P BHpop(r))) * P conf``, r the analyses up to R
  (nominations at successive analyses share data and are positively associated, so the
  product form is an upper bound on the union); ``x obs``: the factor on the screening
  observations (e.g. 2 = two independent timed observations per round, for every node)
  at which ``P BHpop`` reaches 0.95 by that R, everything else equal (``inf``: not
  below 64).

Optimistic (an oracle; the real test does worse): known variances (the real test uses a
moderated t at ~10-20 df whose variance is only ever raised), the expected arm sizes
(random ones cost power; pair coverage is 0.998 at 12 screening rounds and 2/3), round
effects removed exactly, normal tails for jitter's half-normal delays, no futility stop,
no confirmation budget (``confirm_budget_rounds``) and every attempt nominated. Left out
in the other direction: the other detectors (forward selection, correlation), which can
nominate a pair the mutual test misses, and the capacity and slowness tests, which
*catch* farms without contention. BH in expectation is an approximation, not a bound
(the count of discoveries is random). Use the table to tell a gap the code could close
(bound high, measured low) from one the data cannot (bound low).

``--mc REPS`` adds ``MC ideal``: the real mutual test (median polish, moderated t, BH
at ``mutual_fdr``, the floors) on ideal rows of the same model, REPS simulated
populations (:func:`ideal_rows`; a small simulation, off by default): the model's
optimism is the gap between ``P BHpop`` and it, the rest of the pipeline (deadlines,
censoring, the other detectors, confirmation and its budget) the gap between it and a
benchmark run (``measured``: found k = 2 in session 10, at the default design only).

Run: ``.venv/bin/python benchmarks/detection_bounds.py [--rounds 16 32] [--q Q]
[--full-every F] [--scenario NAME ...] [--no-obs] [--mc REPS] [--markdown]``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy.stats import binom, norm

sys.path.insert(0, str(Path(__file__).resolve().parent))

import detection  # noqa: E402

from netcheck.analysis.confirm import ConfirmConfig  # noqa: E402
from netcheck.analysis.confirm_run import ConfirmationRun, spending_weight  # noqa: E402
from netcheck.analysis.detector_config import DetectorConfig  # noqa: E402
from netcheck.analysis.mutual import mutual_hits, mutual_test  # noqa: E402
from netcheck.analysis.timing import median_polish  # noqa: E402
from netcheck.config.coordinator import CoordinatorConfig  # noqa: E402
from netcheck.lab.sim.population import PopulationSpec, make_population  # noqa: E402

FloatArray = npt.NDArray[np.float64]
_FIELDS = CoordinatorConfig.model_fields
Q_DEFAULT = float(_FIELDS["screening_load_probability"].default)
FULL_EVERY_DEFAULT = int(_FIELDS["screening_full_every"].default)
ANALYZE_EVERY = int(_FIELDS["screening_analyze_every"].default)
CONFIRM_CYCLES = int(_FIELDS["confirm_cycles"].default)
CONFIRM_MAX_CYCLES = int(_FIELDS["confirm_max_cycles"].default)
POWER = 0.95
MAX_OBS = 64.0

# found k=2 by 16 / 32 rounds measured in session 10 at today's defaults (benchmarks/
# detection.py, docs/detection.md "Current figures"), printed beside the bound
MEASURED_S10 = {
    "plain": (1.00, 1.00),
    "jitter": (0.59, 0.94),
    "plain n=200 s=0.15 b=0.5": (0.78, 1.00),
    "plain n=200 s=0.05 b=0.3": (0.88, 1.00),
    "plain n=1000 s=0.05 b=0.5": (1.00, 1.00),
    "jitter n=200 s=0.15 b=0.5": (0.22, 0.69),
    "jitter n=200 s=0.05 b=0.3": (0.00, 0.00),
    "jitter n=1000 s=0.05 b=0.5": (0.57, 0.96),
}

_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(9)  # E[f(u)], u ~ N(0, 1)
_GH_W = _GH_W / _GH_W.sum()
_E_GRID = np.linspace(-7.0, 7.0, 281)  # standard-normal grid of one effect estimate


@dataclass(frozen=True)
class Design:
    """The screening and confirmation settings the bound is computed at (defaults:
    today's ``CoordinatorConfig``, ``DetectorConfig`` and ``ConfirmConfig``)."""

    q: float = Q_DEFAULT
    full_every: int = FULL_EVERY_DEFAULT
    analyze_every: int = ANALYZE_EVERY
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    confirm: ConfirmConfig = field(default_factory=ConfirmConfig)
    confirm_cycles: int = CONFIRM_CYCLES
    confirm_max_cycles: int = CONFIRM_MAX_CYCLES

    def screening_rounds(self, rounds: int) -> int:
        """Screening (not full) rounds among the first ``rounds``."""
        return rounds - rounds // self.full_every

    def variance_factor(self) -> float:
        """``1 / (q^2 (1 - q))``: a row's effect variance is ``s^2`` times this over the
        screening rounds (both loaded ``q^2``, only this node ``q (1 - q)``)."""
        return 1.0 / (self.q * self.q * (1.0 - self.q))

    def looks(self) -> int:
        """Looks of one confirmation attempt of a pair (``ConfirmationRun.looks``)."""
        run = ConfirmationRun(("a", "b"), self.confirm_cycles, self.confirm_max_cycles)
        return run.looks

    def look_level(self, attempt: int) -> float:
        """Each member's level at a look of the ``attempt``-th confirmation of a pair."""
        alpha = self.confirm.member_alpha(2) * spending_weight(attempt)
        return alpha / self.confirm.pair_phases / self.looks()


@dataclass(frozen=True)
class Row:
    """A pair's row effect: mean ``delta`` and the extra within-arm variance ``extra``
    (other farm members' load bits) of one member's contrast."""

    delta: float
    extra: float


@dataclass(frozen=True)
class PairClass:
    """``count`` pairs alike: each member's effect (``a``, ``b``) and whether the members
    carry the jitter adversary's delays (``jit_a``, ``jit_b``)."""

    count: float
    a: Row
    b: Row
    jit_a: bool
    jit_b: bool


def farm_row(beta: float, k: int, q: float) -> Row:
    """Row effect of a pair in a farm of ``k``: i's log slowdown with j loaded minus not,
    averaged over the other ``k - 2`` members' load bits (binomial, ``q``)."""
    others = np.arange(k - 1)
    w = binom.pmf(others, k - 2, q) if k > 2 else np.ones(1)
    on, off = np.log1p(beta * (others + 1)), np.log1p(beta * others)
    var_on = float(w @ (on - w @ on) ** 2)
    var_off = float(w @ (off - w @ off) ** 2)
    return Row(float(w @ (on - off)), (var_on + var_off) / 2.0)


def noise_sd(spec: PopulationSpec, jitter: bool, extra: float) -> FloatArray:
    """A member's noise sd at the Gauss-Hermite nodes of its ``u``."""
    var = (spec.sigma_w * np.exp(spec.sigma_spread * _GH_X)) ** 2 + extra
    if jitter:
        var = var + spec.jitter_log_sd**2 * (1.0 - 2.0 / math.pi)
    return np.sqrt(var)


def pass_probability(
    spec: PopulationSpec, pc: PairClass, scale: float, z_crit: float, floor: float
) -> float:
    """P(one pair of class ``pc`` has Stouffer ``Z > z_crit`` and meets the floors).

    ``scale``: a row's effect sd per unit noise sd, ``sqrt(factor / (R_s obs))``.
    Integrated over both members' noise levels (Gauss-Hermite) and member a's effect
    estimate (grid); member b's in closed form.
    """
    sd_a = noise_sd(spec, pc.jit_a, pc.a.extra)[:, None, None] * scale  # (u_a, 1, e)
    sd_b = noise_sd(spec, pc.jit_b, pc.b.extra)[None, :, None] * scale  # (1, u_b, 1)
    e_a = pc.a.delta + sd_a * _E_GRID[None, None, :]
    need = np.maximum(
        sd_b * (math.sqrt(2.0) * z_crit - e_a / sd_a),  # Stouffer
        np.maximum(2.0 * floor - e_a, floor / 2.0),  # mean above the floor, b above half
    )
    p_b = norm.sf((need - pc.b.delta) / sd_b) * (e_a > floor / 2.0)
    dens = norm.pdf(_E_GRID)
    inner = np.trapezoid(p_b * dens, _E_GRID, axis=2)  # (u_a, u_b)
    return float(_GH_W @ inner @ _GH_W)


def pair_classes(spec: PopulationSpec, q: float) -> tuple[PairClass, list[PairClass]]:
    """The farm pair of size 2 (the G1 pair) and every class of pairs of the population:
    farm pairs by farm size, honest co-hosted pairs, unrelated pairs."""
    jit = "jitter" in spec.behaviours
    null = Row(0.0, 0.0)
    classes: list[PairClass] = []
    for k in sorted(set(spec.farm_sizes)):
        r = farm_row(spec.beta, k, q)
        count = spec.farm_sizes.count(k) * k * (k - 1) / 2
        classes.append(PairClass(count, r, r, jit, jit))
    cohost = Row(math.log1p(spec.benign_coupling), 0.0)
    classes.append(PairClass(spec.cohosted_pairs, cohost, cohost, False, False))
    n_farm = sum(spec.farm_sizes)
    n_honest = spec.n_nodes - n_farm
    within = sum(k * (k - 1) / 2 for k in spec.farm_sizes)
    classes.append(PairClass(n_honest * (n_honest - 1) / 2 - spec.cohosted_pairs, null, null,
                             False, False))  # fmt: skip
    classes.append(PairClass(n_honest * n_farm, null, null, False, jit))
    classes.append(PairClass(n_farm * (n_farm - 1) / 2 - within, null, null, jit, jit))
    pair = PairClass(1, farm_row(spec.beta, 2, q), farm_row(spec.beta, 2, q), jit, jit)
    return pair, classes


def bh_level(
    spec: PopulationSpec, classes: Sequence[PairClass], scale: float, fdr: float, floor: float
) -> float:
    """BH threshold in expectation: the largest t with ``D(t) >= m t / fdr`` (module
    docstring); 0 when there is none."""
    m = spec.n_nodes * (spec.n_nodes - 1) / 2.0

    def gap(log_t: float) -> float:
        z = float(norm.isf(math.exp(log_t)))
        found = sum(c.count * pass_probability(spec, c, scale, z, floor) for c in classes)
        return found - m * math.exp(log_t) / fdr

    grid = np.linspace(math.log(fdr), math.log(1e-14), 40)
    for hi, lo in zip(grid[:-1], grid[1:], strict=True):
        if gap(lo) >= 0:
            if gap(hi) >= 0:
                return math.exp(hi)
            for _ in range(20):
                mid = (hi + lo) / 2
                hi, lo = (mid, lo) if gap(mid) < 0 else (hi, mid)
            return math.exp(lo)
    return 0.0


def nomination(
    spec: PopulationSpec, rounds: int, design: Design, obs: float = 1.0
) -> dict[str, float]:
    """Nomination of a farm pair (k = 2) by the analysis at ``rounds`` rounds, with
    ``obs`` times the screening observations: expected z, the levels and the
    probabilities (module docstring)."""
    cfg = design.detector
    floor = cfg.effect_floor
    r_s = design.screening_rounds(rounds)
    scale = math.sqrt(design.variance_factor() / (r_s * obs))
    pair, classes = pair_classes(spec, design.q)
    population = [c for c in classes if c.count > 0]
    bonf = cfg.p_crit_mutual(spec.n_nodes)
    # one farm pair among honest identities only (unrelated, not co-hosted)
    lone_null = PairClass(spec.n_nodes * (spec.n_nodes - 1) / 2 - 1, Row(0, 0), Row(0, 0),
                          False, False)  # fmt: skip
    bh1 = bh_level(spec, [pair, lone_null], scale, cfg.mutual_fdr, floor)
    bhp = bh_level(spec, population, scale, cfg.mutual_fdr, floor)
    sd_med = math.sqrt(spec.sigma_w**2 + (spec.jitter_log_sd**2 * (1 - 2 / math.pi)
                                          if pair.jit_a else 0.0)) * scale  # fmt: skip

    def p_at(level: float) -> float:
        return pass_probability(spec, pair, scale, float(norm.isf(level)), floor)

    return {
        "z": math.sqrt(2.0) * pair.a.delta / sd_med,
        "z_bh": float(norm.isf(max(bonf, bhp))),
        "p_bonf": p_at(bonf),
        "p_bh1": p_at(max(bonf, bh1)),
        "p_bh": p_at(max(bonf, bhp)),
    }


def confirmation(spec: PopulationSpec, rounds: int, design: Design) -> dict[str, float]:
    """Confirmation of a farm pair: cycles for power 0.95 at the first attempt's level
    (median noise) and the power of the best attempt possible by ``rounds``."""
    floor = design.confirm.effect_floor
    delta = math.log1p(spec.beta)
    jit = "jitter" in spec.behaviours
    margin = delta - floor
    s2 = spec.sigma_w**2 + (spec.jitter_log_sd**2 * (1 - 2 / math.pi) if jit else 0.0)
    z_a = float(norm.isf(design.look_level(1)))
    z_b = float(norm.isf(1.0 - math.sqrt(POWER)))
    cycles = 2 * s2 * (z_a + z_b) ** 2 / margin**2 if margin > 0 else math.inf
    best = 0.0
    for a in range(1, max(rounds // design.analyze_every, 1) + 1):
        n = a * design.confirm_max_cycles
        sd = noise_sd(spec, jit, 0.0) * math.sqrt(2.0 / n)
        member = float(_GH_W @ norm.sf(float(norm.isf(design.look_level(a))) - margin / sd))
        best = max(best, member * member)
    return {
        "margin": margin,
        "cycles": cycles,
        "p_conf": best,
        "conf_x": max(1.0, cycles / design.confirm_max_cycles),
    }


def obs_needed(spec: PopulationSpec, rounds: int, design: Design) -> float:
    """The factor on screening observations at which ``P BHpop`` reaches 0.95 by the
    analysis at ``rounds`` (``inf`` beyond ``MAX_OBS``)."""
    if nomination(spec, rounds, design)["p_bh"] >= POWER:
        return 1.0
    if nomination(spec, rounds, design, MAX_OBS)["p_bh"] < POWER:
        return math.inf
    lo, hi = 0.0, math.log(MAX_OBS)
    for _ in range(7):
        mid = (lo + hi) / 2
        ok = nomination(spec, rounds, design, math.exp(mid))["p_bh"] >= POWER
        lo, hi = (lo, mid) if ok else (mid, hi)
    return math.exp(hi)


def bounds(spec: PopulationSpec, rounds: int, design: Design | None = None) -> dict[str, float]:
    """The row of one scenario at ``rounds`` rounds (module docstring)."""
    design = design or Design()
    nom = nomination(spec, rounds, design)
    con = confirmation(spec, rounds, design)
    missed = 1.0
    for r in range(design.analyze_every, rounds + 1, design.analyze_every):
        missed *= 1.0 - (nom["p_bh"] if r == rounds else nomination(spec, r, design)["p_bh"])
    return {**nom, **con, "found": (1.0 - missed) * con["p_conf"]}


def ideal_rows(
    spec: PopulationSpec, rounds: int, design: Design, reps: int, seed: int = 0
) -> float:
    """The real mutual test on ideal screening rows (a small simulation, only with
    ``--mc``): the fraction of farm pairs of 2 that :func:`~netcheck.analysis.mutual.
    mutual_hits` nominates after the median polish at ``design.detector``, over ``reps``
    populations, each with ``R_s`` screening rounds of independent coins at ``q``
    (:meth:`~netcheck.lab.sim.population.Population.service_times`: no deadline, no
    censoring, no full rounds, no confirmation, no other detector). Between the model
    (``P BHpop``) and this: the test's own costs (t tails, random arm sizes, the
    moderated variance); between this and a benchmark run: the rest of the pipeline."""
    cfg, r_s = design.detector, design.screening_rounds(rounds)
    hit = total = 0
    for rep in range(reps):
        rng = np.random.default_rng([seed, rep])
        pop = make_population(spec, rng)
        loaded = rng.random((len(pop.node_keys), r_s)) < design.q
        y = np.column_stack([pop.service_times(loaded[:, r], rng) for r in range(r_s)])
        polish = median_polish(np.log(y), col_prior_cells=cfg.round_prior_cells)
        hits = mutual_hits(mutual_test(polish.residuals, loaded, cfg), cfg)
        row = {k: i for i, k in enumerate(pop.node_keys)}
        for farm in pop.farms:
            if len(farm) == 2:
                i, j = sorted((row[farm[0]], row[farm[1]]))
                hit, total = hit + bool(hits[i, j]), total + 1
    return hit / total if total else math.nan


def g1_scenarios(names: Sequence[str] = ()) -> list[detection.Scenario]:
    """The plain and jitter scenarios of the grid with farms of 2 on a matched backend."""
    out = []
    for sc in detection.scenarios():
        if sc.spec.adversary not in ("none", "jitter") or sc.spec.farm_backend != "matched":
            continue
        if sc.spec.backend_speedup != 1.0 or 2 not in sc.spec.farm_sizes:
            continue
        if not names or sc.name in names:
            out.append(sc)
    return out


def _fmt(x: float, spec: str) -> str:
    return "inf" if math.isinf(x) else "-" if math.isnan(x) else format(x, spec)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--q", type=float, default=Q_DEFAULT, help="screening load probability")
    ap.add_argument("--full-every", type=int, default=FULL_EVERY_DEFAULT)
    ap.add_argument("--scenario", nargs="+", default=[])
    ap.add_argument("--no-obs", action="store_true", help="skip the x obs column (faster)")
    ap.add_argument(
        "--mc",
        type=int,
        default=0,
        metavar="REPS",
        help="also the real mutual test on ideal rows, REPS populations (slow)",
    )
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    design = Design(q=args.q, full_every=args.full_every)
    cfg = design.detector
    print(f"EMULATION (model bound, no run): q {design.q:.3f}, every {design.full_every}th round "
          f"full, mutual_fdr {cfg.mutual_fdr}, confirmation looks {design.looks()} up to "
          f"{design.confirm_max_cycles} cycles")  # fmt: skip
    cols = ["R", "R_s", "E[z]", "z*", "P bonf", "P BH1", "P BHpop", "P conf", "found <=",
            "x obs", "measured"]  # fmt: skip
    if args.mc:
        cols.insert(-4, "MC ideal")
    pre = ["scenario", "margin", "cycles", "conf x"]
    if args.markdown:
        print("\n| " + " | ".join(pre + cols) + " |")
        print("|---|" + "---:|" * (len(pre) + len(cols) - 1))
    else:
        print(f"{pre[0]:28s} " + " ".join(f"{c:>7s}" for c in pre[1:] + cols))
    for sc in g1_scenarios(args.scenario):
        meas = MEASURED_S10.get(sc.name)
        for i, r in enumerate(args.rounds):
            b = bounds(sc.spec, r, design)
            x = math.nan if args.no_obs else obs_needed(sc.spec, r, design)
            m = "-"
            if meas and r in (16, 32) and design == Design():
                m = f"{meas[0 if r == 16 else 1]:.2f}"
            cells = [str(r), str(design.screening_rounds(r)), f"{b['z']:.2f}", f"{b['z_bh']:.2f}",
                     f"{b['p_bonf']:.2f}", f"{b['p_bh1']:.2f}", f"{b['p_bh']:.2f}",
                     f"{b['p_conf']:.2f}", f"{b['found']:.2f}", _fmt(x, ".2f"), m]  # fmt: skip
            if args.mc:
                cells.insert(-4, f"{ideal_rows(sc.spec, r, design, args.mc):.2f}")
            name = sc.name if i == 0 else ""
            head = [name, "", "", ""]
            if i == 0:
                head = [name, f"{b['margin']:.3f}", _fmt(b["cycles"], ".0f"),
                        _fmt(b["conf_x"], ".2f")]  # fmt: skip
            if args.markdown:
                print("| " + " | ".join(head + cells) + " |")
            else:
                print(f"{head[0]:28s} " + " ".join(f"{c:>7s}" for c in head[1:] + cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
