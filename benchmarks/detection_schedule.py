"""Benchmark (issue 13, G1): a *candidate* screening schedule against the coordinator's,
on EMULATED populations through the live detection loop (:mod:`netcheck.lab.sim.live`).

Why: a pair can be linked only after >= 2 screening rounds in each of three arms (both
loaded, only one, only the other). With independent fair coins and every 4th round a
full round, 16 rounds are 12 screening rounds and a pair has those arms with
probability ``pair_coverage(12)`` = 0.558, which caps recall at 16 rounds.

Candidate (NOT what the coordinator does; measured here only): **per-node balanced
blocks**. Screening rounds are grouped in blocks of ``B``; each node is loaded in
exactly ``B/2`` rounds of each block, at positions that are secret and random: position
``p`` of block ``b`` loads node ``k`` iff ``HMAC-SHA256(secret, b"netcheck/balanced\\0"
+ b + b"\\0" + k + b"\\0" + p)`` ranks among the ``B/2`` smallest of the node's ``B``
tags (recomputable with the secret, like the current rule). The both-loaded count of a
pair is then hypergeometric instead of binomial: coverage after one block of 12 is
0.920, of 14 is 0.971 (:func:`balanced_coverage`), against 0.558 and 0.708 for coins.
Cost: within a block a node that has had its ``B/2`` loads knows it is idle for the
rest of the block (the schedule is less unpredictable; farms learn nothing about
*other* identities' loads from it).

Configs (same populations and seeds): ``coins/4`` = the coordinator today (coins, every
4th round full); ``balanced12/4`` = blocks of 12, every 4th full; ``balanced14/8`` =
blocks of 14, every 8th round full (16 rounds = 14 screening + 2 full). Printed: plain
pairs found (confirmed shared-backend flag) at 16 and 32 rounds, farms caught by
anything (capacity, relay, slow included: fewer full rounds are fewer capacity rounds),
honest nodes in shared-backend flags (FF) and honest slow/capacity flags.

Run: ``.venv/bin/python benchmarks/detection_schedule.py [--seeds 6] [--n 200]``.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import math
import time
from dataclasses import replace

import numpy as np

from netcheck.analysis.schedule import pair_coverage
from netcheck.analysis.screening import round_kind
from netcheck.lab.sim.live import LiveConfig, LiveSimulation
from netcheck.lab.sim.population import Population, PopulationSpec, make_population

LABEL = b"netcheck/balanced\0"


def balanced_bits(secret: bytes, block_id: str, position: int, block: int,
                  node_keys: tuple[str, ...]) -> np.ndarray:  # fmt: skip
    """Load bits of position ``position`` of block ``block_id`` (module docstring)."""
    out = np.zeros(len(node_keys), dtype=bool)
    for i, key in enumerate(node_keys):
        tags = [hmac.new(secret, LABEL + f"{block_id}\0{key}\0{p}".encode(), hashlib.sha256)
                .digest() for p in range(block)]  # fmt: skip
        rank = sorted(range(block), key=lambda p: tags[p]).index(position)
        out[i] = rank < block // 2
    return out


def balanced_coverage(block: int, min_rounds: int = 2) -> float:
    """Chance that a pair has >= ``min_rounds`` rounds in each of both / only i / only
    j after one block (hypergeometric both-loaded count)."""
    h = block // 2
    ok = range(min_rounds, h - min_rounds + 1)
    return sum(math.comb(h, x) * math.comb(block - h, h - x) for x in ok) / math.comb(block, h)


class BalancedSimulation(LiveSimulation):
    """EMULATION: the live loop with the candidate schedule (blocks of ``block``)."""

    block = 14

    def screening_round(self) -> str:
        """The next round: full, or position ``s % block`` of block ``s // block``."""
        kind = round_kind(self.index, self.cfg.full_every)
        rid = f"screen-{self.index:05d}"
        self.index += 1
        if kind == "full":
            bits = np.ones(len(self.keys), dtype=bool)
        else:
            s = sum(1 for r in self.state.round_ids if self.state.kinds[r] == "screening")
            b, pos = divmod(s, self.block)
            bits = balanced_bits(self.secret, f"block-{b}", pos, self.block, self.keys)
        self.state.round_ids.append(rid)
        self._round(rid, kind, bits)
        return kind


def spec_for(n: int) -> PopulationSpec:
    """The benchmark's base population (benchmarks/detection.py) at ``n`` identities."""
    scale = max(n / 200.0, 0.5)
    farms = tuple(k for k, c in ((2, 8), (3, 6), (5, 4)) for _ in range(round(c * scale)))
    return replace(PopulationSpec(benign_coupling=0.2), n_nodes=n, farm_sizes=farms)


def run(name: str, pop_seed: list[Population], seeds: int) -> dict[str, object]:
    """One config over ``seeds`` populations; metrics at 16 and 32 rounds."""
    block, full = {"coins/4": (0, 4), "balanced12/4": (12, 4), "balanced14/8": (14, 8)}[name]
    found: dict[int, list[bool]] = {16: [], 32: []}
    caught: dict[int, list[bool]] = {16: [], 32: []}
    ff = slow_h = cap_h = 0
    for seed in range(seeds):
        pop = pop_seed[seed]
        cfg = LiveConfig(full_every=full)
        rng = np.random.default_rng([seed, 2])
        if block:
            sim: LiveSimulation = BalancedSimulation(pop, cfg, rng, secret=bytes([seed]) * 32)
            sim.block = block  # type: ignore[attr-defined]
        else:
            sim = LiveSimulation(pop, cfg, rng, secret=bytes([seed]) * 32)
        for snap in sim.run([16, 32]):
            flagged = snap.capacity | snap.relay | snap.slow
            for f in pop.farms:
                fd = any(len(set(fl) & set(f)) >= 2 for fl in snap.shared_flags)
                if len(f) == 2:
                    found[snap.rounds].append(fd)
                caught[snap.rounds].append(fd or bool(set(f) & flagged))
            if snap.rounds == 32:
                ff += len({k for fl in snap.shared_flags for k in fl} & pop.honest)
                slow_h += len(snap.slow & pop.honest)
                cap_h += len(snap.capacity & pop.honest)
    return {"config": name, "found2@16": float(np.mean(found[16])),
            "found2@32": float(np.mean(found[32])), "caught@16": float(np.mean(caught[16])),
            "caught@32": float(np.mean(caught[32])), "pairs": len(found[16]), "FF": ff,
            "slowH": slow_h, "capH": cap_h}  # fmt: skip


def main() -> int:
    """Run the three configs on the same populations; print a table and ratios."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    start = time.perf_counter()
    pops = [make_population(spec_for(args.n), np.random.default_rng([s, 1]))
            for s in range(args.seeds)]  # fmt: skip
    print(f"EMULATION — candidate screening schedule, n = {args.n}, {args.seeds} seeds")
    print(f"coverage bound at 16 rounds: coins/4 (12 screening) "
          f"{pair_coverage(12):.3f}; balanced12/4 "
          f"{balanced_coverage(12):.3f}; balanced14/8 {balanced_coverage(14):.3f}")  # fmt: skip
    rows = [run(name, pops, args.seeds) for name in ("coins/4", "balanced12/4", "balanced14/8")]
    keys = list(rows[0])
    print(" | ".join(f"{k:>12}" for k in keys))
    for r in rows:
        print(" | ".join(f"{r[k]:>12.2f}" if isinstance(r[k], float) else f"{r[k]!s:>12}"
                         for k in keys))  # fmt: skip
    base = rows[0]["found2@16"]
    for r in rows[1:]:
        ratio = r["found2@16"] / base if isinstance(base, float) and base else math.nan  # type: ignore[operator]
        print(f"{r['config']}: plain pairs found at 16 rounds x{ratio:.2f} vs coins/4")
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
