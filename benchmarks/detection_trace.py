"""Diagnostic (EMULATION): where the farm pairs of one benchmark cell go, analysis by
analysis, in the live simulation (:class:`netcheck.lab.sim.live.LiveSimulation`).

For one scenario and config of ``benchmarks/detection.py`` and a few seeds, runs the
cell to ``--rounds`` and records, for every farm of 2 at every analysis:

- the mutual pair test on the *real* simulated rows (the residuals the live analysis
  reads: :func:`~netcheck.analysis.screening.analyse`'s matrix and polish; a test checks
  that its z is the analysis's own): its Stouffer ``z`` and ``p``, the analysis's level (Bonferroni or BH), both
  directions' effects and whether they meet the floors
  (:func:`~netcheck.analysis.mutual.above_floors`), and whether it is a hit;
- whether the pair has any edge (A, A-reverse, A-mutual, B) and the suspect groups
  holding a member (with their other members: ``h`` honest, ``f`` another farm);
- the confirmation runs holding both members that the analysis started, each with its
  outcome: ``flag`` (shared-backend flag with both), ``clear-last-group`` /
  ``clear-last-split`` (cleared at the phase's last look), ``futile`` (the futility
  stop), ``budget`` (stopped by the budget,
  :meth:`~netcheck.analysis.confirm_run.ConfirmationRun.close`), with its attempt, looks,
  rounds, members and the members' effect estimates at its last look;
  or ``unserved`` (a group holding the pair not started: budget) / ``covered`` (already
  flagged);
- capacity / slow / relay flags on either member so far.

Then a summary per analysis round count: the fractions of farm pairs hit by the mutual
test, in a suspect group as a pair, confirmed, cleared (by reason), unserved...; the
mean level (z) and the whole BH family by pair class (nominable pairs and hits among
farm pairs of 2, pairs within farms of 3+, honest co-hosted pairs, unrelated pairs: the
level moves with them); and the ``found`` of :func:`benchmarks.detection.score` at
each checkpoint.

Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/detection_trace.py --scenario
"jitter n=200 s=0.15 b=0.5" --config new --seeds 4 [--rounds 32] [--per-pair]``.
``--ideal`` adds the mutual test on ideal rows drawn for the *same* population and the
same load bits (``detection_bounds.ideal_rows``' model: no deadline, fresh noise), so
the real rows' nomination rate can be compared with the model's on the same
populations (in aggregate: the noise differs pair by pair).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import detection  # noqa: E402  (benchmarks/detection.py: scenarios, configs, seeds)

import netcheck.lab.sim.live as live  # noqa: E402
from netcheck.analysis.confirm_run import ConfirmationRun  # noqa: E402
from netcheck.analysis.detectors import SuspectGroup  # noqa: E402
from netcheck.analysis.mutual import above_floors, mutual_level, mutual_test  # noqa: E402
from netcheck.analysis.screening import Analysis  # noqa: E402
from netcheck.analysis.timing import median_polish  # noqa: E402
from netcheck.lab.sim.population import Population, make_population  # noqa: E402


@dataclass
class RunTrace:
    """One confirmation run: members, outcome and how far it went."""

    members: tuple[str, ...]
    attempt: int
    flags: list[tuple[str, ...]] = field(default_factory=list)
    outcome: str = ""
    looks: int = 0
    rounds: int = 0
    effects: tuple[float, ...] = ()


@dataclass
class AnalysisTrace:
    """What one analysis did (module docstring)."""

    index: int
    rounds: int
    level: float
    z: np.ndarray
    p: np.ndarray
    effect: np.ndarray
    floors: np.ndarray
    edges: dict[tuple[str, str], tuple[str, float]]  # kind, statistic
    groups: list[tuple[str, ...]]
    runs: list[RunTrace]
    not_run: list[tuple[tuple[str, ...], str]]
    capacity: frozenset[str]
    slow: frozenset[str]
    relay: frozenset[str]
    shared: list[tuple[str, ...]]
    index_of: dict[str, int]
    ideal_z: np.ndarray | None = None
    ideal_hit: np.ndarray | None = None
    ideal_level: float = float("nan")
    population: dict[str, int] = field(default_factory=dict)


class TracedSimulation(live.LiveSimulation):
    """:class:`LiveSimulation` that keeps an :class:`AnalysisTrace` per analysis."""

    def __init__(self, *args: Any, ideal: bool = False, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.traces: list[AnalysisTrace] = []
        self._runs: list[RunTrace] = []
        self._analysis: Analysis | None = None
        self._ideal = ideal
        self._ideal_rng = np.random.default_rng([7, 7])

    def analyse_and_confirm(self) -> None:
        orig = live.analyse

        def capture(*a: Any, **k: Any) -> Analysis:
            out = orig(*a, **k)
            self._analysis = out
            return out

        live.analyse = capture
        try:
            self._runs = []
            super().analyse_and_confirm()
        finally:
            live.analyse = orig

    def _confirm(
        self, groups: Sequence[SuspectGroup], links: Sequence[tuple[str, str]], batch_id: str
    ) -> list[tuple[str, ...]]:
        covered_before = [self._covered(g.members) for g in groups]
        started = super()._confirm(groups, links, batch_id)
        run_sets = [set(m) for m in started]
        not_run = []
        for g, cov in zip(groups, covered_before, strict=True):
            if set(g.members) in run_sets:
                continue
            reason = "covered" if cov or self._covered(g.members) else "unserved"
            not_run.append((tuple(g.members), reason))
        self._trace(groups, not_run)
        return started

    def _record(self, run: ConfirmationRun) -> None:
        super()._record(run)
        res = run.group_result
        if run.flags:
            outcome = "flag"
        elif getattr(run, "_closed_early", False):
            outcome = "budget"
        elif run.phase == "group" and run._looks_done < run.looks:
            outcome = "futile"
        else:
            outcome = f"clear-last-{run.phase}"
        effects = tuple(round(t.effect, 3) for t in res.members) if res is not None else ()
        self._runs.append(RunTrace(tuple(run.members), run.attempt, list(run.flags), outcome,
                                   run._looks_done, len(run.observations), effects))  # fmt: skip

    def _trace(
        self, groups: Sequence[SuspectGroup], not_run: list[tuple[tuple[str, ...], str]]
    ) -> None:
        an = self._analysis
        assert an is not None
        cfg = self.cfg.detector
        mat = an.matrix
        # the analysis's matrix holds the rounds its detectors read (no full rounds
        # with drop_full_rounds: screen_round_ids), so its polish is theirs
        polish = median_polish(mat.y, col_prior_cells=cfg.round_prior_cells)
        e, loaded = polish.residuals, mat.loaded
        mt = mutual_test(e, loaded, cfg)
        level = mutual_level(mt, cfg)
        st = self.state
        trace = AnalysisTrace(
            len(self.traces) + 1, self.index, level, mt.z, mt.p, mt.effect,
            above_floors(mt, cfg, cfg.mutual_nominate_floor),
            {(ed.a, ed.b): (ed.detector, ed.statistic) for ed in an.detection.edges},
            [tuple(g.members) for g in groups], list(self._runs), not_run,
            frozenset(k for k, r in st.capacity.items() if r), frozenset(st.slow),
            frozenset(st.relay), list(st.shared),
            {k: i for i, k in enumerate(mat.node_keys)},
        )  # fmt: skip
        trace.population = self._population(mt.p, trace.floors, level, mat.node_keys)
        if self._ideal:
            trace.ideal_z, trace.ideal_hit, trace.ideal_level = self._ideal_test(
                loaded, mat.node_keys
            )
        self.traces.append(trace)

    def _population(
        self, p: np.ndarray, floors: np.ndarray, level: float, keys: Sequence[str]
    ) -> dict[str, int]:
        """The analysis's whole BH family by pair class: nominable pairs (floors met,
        testable) and hits, for farm pairs of 2, pairs within farms of 3+, honest
        co-hosted pairs and the rest (unrelated)."""
        pop = self.pop
        idx = np.array([self.keys.index(k) for k in keys])
        farm, cohost = pop.farm_of[idx], pop.cohost_of[idx]
        same = (farm[:, None] == farm[None, :]) & (farm[:, None] >= 0)
        size = pop.farm_size[idx]
        host = cohost[:, None] == idx[None, :]
        upper = np.triu(np.ones_like(same), 1)
        nominable = upper & floors & np.isfinite(p)
        hit = nominable & (p < level)
        out: dict[str, int] = {}
        for name, mask in (
            ("farm2", same & (size[:, None] == 2)),
            ("farm3+", same & (size[:, None] > 2)),
            ("cohost", host),
            ("other", ~same & ~host),
        ):
            out[f"nominable {name}"] = int((nominable & mask).sum())
            out[f"hit {name}"] = int((hit & mask).sum())
        return out

    def _ideal_test(
        self, loaded: np.ndarray, keys: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """The mutual test on ideal rows of the same population and load bits."""
        cfg = self.cfg.detector
        order = [self.keys.index(k) for k in keys]
        cols = []
        for r in range(loaded.shape[1]):
            bits = np.zeros(len(self.keys), dtype=bool)
            bits[order] = loaded[:, r]
            cols.append(self.pop.service_times(bits, self._ideal_rng)[order])
        y = np.log(np.column_stack(cols))
        res = median_polish(y, col_prior_cells=cfg.round_prior_cells).residuals
        mt = mutual_test(res, loaded, cfg)
        level = mutual_level(mt, cfg)
        hit = (mt.p < level) & above_floors(mt, cfg, cfg.mutual_nominate_floor)
        return mt.z, hit, level


_ORIG_CLOSE = ConfirmationRun.close


def _close(self: ConfirmationRun) -> None:
    """:meth:`ConfirmationRun.close`, marking a run stopped before its verdict (the
    budget, in the simulator) so that its outcome reads ``budget``."""
    if not self.done and self.group_result is not None:
        self._closed_early = True  # type: ignore[attr-defined]
    _ORIG_CLOSE(self)


def pair_rows(pop: Population, sim: TracedSimulation) -> list[dict[str, Any]]:
    """One dict per farm of 2 and analysis (module docstring)."""
    honest = pop.honest
    farm_of = {k: i for i, f in enumerate(pop.farms) for k in f}
    out = []
    for f, farm in enumerate(pop.farms):
        if len(farm) != 2:
            continue
        a, b = farm
        for tr in sim.traces:
            i, j = tr.index_of[a], tr.index_of[b]
            row: dict[str, Any] = {"farm": f, "an": tr.index, "R": tr.rounds}
            row["z"] = float(tr.z[i, j])
            row["p"] = float(tr.p[i, j])
            row["z_level"] = float(-np.inf if tr.level <= 0 else _z(tr.level))
            row["eff"] = (float(tr.effect[i, j]), float(tr.effect[j, i]))
            row["floors"] = bool(tr.floors[i, j])
            row["hit"] = bool(tr.p[i, j] < tr.level and tr.floors[i, j])
            row["edge"], row["edge_stat"] = tr.edges.get((min(a, b), max(a, b)), ("", np.nan))
            if tr.ideal_z is not None and tr.ideal_hit is not None:
                row["ideal_z"] = float(tr.ideal_z[i, j])
                row["ideal_hit"] = bool(tr.ideal_hit[min(i, j), max(i, j)])
                row["ideal_z_level"] = _z(tr.ideal_level) if tr.ideal_level > 0 else float("inf")
            gs = []
            for g in tr.groups:
                if a in g or b in g:
                    others = "".join(
                        "h" if k in honest else ("f" if farm_of.get(k) != f else "") for k in g
                    )
                    gs.append(("AB" if a in g and b in g else ("A" if a in g else "B")) + others)
            row["groups"] = gs
            row["runs"] = [f"{r.outcome}(a{r.attempt},L{r.looks},{r.rounds}r,{len(r.members)}m,"
                           f"eff {'/'.join(f'{x:+.2f}' for x in r.effects)})"
                           for r in tr.runs if a in r.members and b in r.members]  # fmt: skip
            row["not_run"] = [reason for g, reason in tr.not_run if a in g and b in g]
            row["flagged"] = any({a, b} <= set(fl) for fl in tr.shared)
            row["other"] = ",".join(
                name for name, s in (("cap", tr.capacity), ("slow", tr.slow), ("relay", tr.relay))
                if a in s or b in s
            )  # fmt: skip
            out.append(row)
    return out


def _z(p: float) -> float:
    from scipy.stats import norm

    return float(norm.isf(p))


def trace_cell(
    scenario: str, config: str, seeds: Sequence[int], rounds: int = 32, ideal: bool = False
) -> tuple[list[tuple[int, dict[str, Any]]], dict[int, list[bool]], list[dict[str, Any]]]:
    """Run ``scenario`` x ``config`` on ``seeds`` (as ``benchmarks/detection.py`` does) to
    ``rounds``: the :func:`pair_rows` of every seed as ``(seed, row)``, the benchmark's
    ``found2`` per checkpoint, and per analysis its level (z) and whole BH family by
    pair class (:meth:`TracedSimulation._population`)."""
    sc = next(s for s in detection.scenarios() if s.name == scenario)
    cfg = detection.CONFIGS[config]()
    rows: list[tuple[int, dict[str, Any]]] = []
    found: dict[int, list[bool]] = {}
    levels: list[dict[str, Any]] = []
    ConfirmationRun.close = _close  # type: ignore[method-assign]
    try:
        for seed in seeds:
            pop = make_population(sc.spec, np.random.default_rng([seed, 1]))
            sim = TracedSimulation(pop, cfg, np.random.default_rng([seed, 2]),
                                   secret=detection.seed_secret(seed), ideal=ideal)  # fmt: skip
            cps = sorted({r for r in detection.ROUNDS if r <= rounds} | {rounds})
            for snap in sim.run(cps):
                found.setdefault(snap.rounds, []).extend(detection.score(pop, snap)["found2"])
            rows += [(seed, row) for row in pair_rows(pop, sim)]
            for tr in sim.traces:
                level_z = _z(tr.level) if tr.level > 0 else float("inf")
                levels.append({"seed": seed, "R": tr.rounds, "level z": level_z, **tr.population})
    finally:
        ConfirmationRun.close = _ORIG_CLOSE  # type: ignore[method-assign]
    return rows, found, levels


def summary(rows: Sequence[tuple[int, dict[str, Any]]]) -> dict[int, Counter[str]]:
    """Counts per analysis round count (``pairs`` = farm pairs of 2; the rest as the
    module docstring lists)."""
    counts: dict[int, Counter[str]] = {}
    for _, row in rows:
        c = counts.setdefault(row["R"], Counter())
        c["pairs"] += 1
        c["hit"] += row["hit"]
        c["z>level"] += row["z"] > row["z_level"]
        c["floors"] += row["floors"]
        c["edge"] += bool(row["edge"])
        if "ideal_hit" in row:
            c["ideal_hit"] += row["ideal_hit"]
        c["in_group_AB"] += any(g.startswith("AB") for g in row["groups"])
        c["group_exact_pair"] += "AB" in row["groups"]
        for r in row["runs"]:
            c["run:" + r.split("(")[0]] += 1
        for reason in row["not_run"]:
            c["notrun:" + reason] += 1
        c["flagged_by_now"] += row["flagged"]
        c["other_flag"] += bool(row["other"])
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cell and print the trace (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--scenario", default="jitter n=200 s=0.15 b=0.5")
    ap.add_argument("--config", default="new", choices=sorted(detection.CONFIGS))
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=32)
    ap.add_argument("--per-pair", action="store_true", help="print one line per pair and analysis")
    ap.add_argument("--ideal", action="store_true", help="also the test on ideal rows")
    args = ap.parse_args(argv)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    rows, found, levels = trace_cell(args.scenario, args.config, seeds, args.rounds, args.ideal)
    if args.per_pair:
        for seed, row in rows:
            print(f"seed {seed} farm {row['farm']:2d} R {row['R']:3d} z {row['z']:5.2f} "
                  f"lvl {row['z_level']:4.2f} eff {row['eff'][0]:+.2f}/{row['eff'][1]:+.2f} "
                  f"fl {int(row['floors'])} hit {int(row['hit'])} "
                  + (f"ideal {row['ideal_z']:5.2f}/{int(row['ideal_hit'])} "
                     f"ilvl {row['ideal_z_level']:4.2f} " if "ideal_z" in row else "")
                  + f"edge {row['edge'] or '-':9s} groups {row['groups']} runs {row['runs']} "
                  f"notrun {row['not_run']} flagged {int(row['flagged'])} other {row['other']}")  # fmt: skip
    counts = summary(rows)
    print(f"\n{args.scenario} / {args.config}, seeds {args.first_seed}.."
          f"{args.first_seed + args.seeds - 1}")  # fmt: skip
    for r, c in sorted(counts.items()):
        n = c["pairs"]
        print(f"R {r:3d}: " + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(c.items())
                                         if k != "pairs") + f" (of {n})")  # fmt: skip
    for r in sorted({x["R"] for x in levels}):
        mine = [x for x in levels if x["R"] == r]
        keys = [k for k in mine[0] if k not in ("seed", "R")]
        print(f"R {r:3d} per analysis: " + ", ".join(
            f"{k} {np.mean([x[k] for x in mine]):.2f}" for k in keys))  # fmt: skip
    for r, hits in sorted(found.items()):
        print(f"found k=2 by {r}: {np.mean(hits):.2f} ({sum(hits)}/{len(hits)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
