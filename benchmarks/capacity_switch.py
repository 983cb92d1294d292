"""The capacity test across a change of the round mix (EMULATION, sessions 11 and 12):
co-hosted honest nodes late only when their neighbour is loaded too, at exactly p0 = 3%
under the reference mix (q 1/2, every 4th round full). 96 timed rounds at one mix, then
the operator changes it and 48 more: q 2/3 -> 1/2 (every 4th round full; session 11),
and every 4th round full -> every 8th (q 2/3; session 12). Count nodes (not flagged
before the change) first flagged in the 48 timed rounds after it, judged at the
window's own round shares (``shares``: q for a screening round, 1 for a full round, as
``checks.stored_round_shares`` reads them from the stored rules; session 12) and at the
configured mix only (``configured``: the test before session 11, bit for bit; for the
change of F also session 11's, which took q from the stored rules but F from the
configuration); baselines: no change, each mix throughout, both ways. alpha 0.2 so that
the counts are large enough to compare (the default is 0.03). Each timed round of a
node is full with probability ``1 / (1 + (F - 1) q)`` (the share of full rounds among
its timed rounds), its neighbour loaded in it if full or with probability q.

Run: ``.venv/bin/python benchmarks/capacity_switch.py SEED NODES`` (session 11: seeds 11
and 12 with 20,000 and 40,000 nodes, about a minute each with its 4 scenarios; session
12: the same seeds, 12 scenarios; docs/detection.md, "Capacity test"). The q change's
random draws come first and are those of session 11's script. Session 12, seeds 11 +
12 (60,000 nodes; configured / shares): q 2/3 -> 1/2 100 / 66 (session 11's largest
null over the stored q: 54), q 2/3 throughout 79 / 74, q 1/2 throughout 76 / 66; F 4 ->
8 121 / 73, F 8 throughout 112 / 96.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netcheck.analysis.lateness import CapacityTestConfig, capacity_test, coupled_share  # noqa: E402

rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 11)
nodes, T1, T2, alpha = int(sys.argv[2]) if len(sys.argv) > 2 else 20000, 96, 48, 0.2
rate = 0.03 / coupled_share(0.5, 4)
cfgs = {
    (q, f): CapacityTestConfig(p0=0.03, alpha=alpha, load_probability=q, full_every=f)
    for q, f in ((2 / 3, 4), (0.5, 4), (2 / 3, 8))
}


def timed(q, n, f=4):
    """(late, full) of ``n`` timed rounds of every node at load probability ``q`` with
    every ``f``-th round full."""
    full = rng.random((nodes, n)) < 1 / (1 + (f - 1) * q)
    coupled = full | (rng.random((nodes, n)) < q)
    return coupled & (rng.random((nodes, n)) < rate), full


def joined(*parts):
    return tuple(np.concatenate(x, 1) for x in zip(*parts, strict=True))


def first_flag_after(late, full, mix_of, stored):
    recent, strikes, shares = [], 0, {}
    for i, hit in enumerate(late):
        recent.insert(0, {"round_id": str(i), "verdict": "late" if hit else "pass"})
        del recent[48:]
        shares[str(i)] = 1.0 if full[i] else mix_of(i)[0]
        if not hit:
            continue
        strikes += 1
        if capacity_test(recent, strikes, cfgs[mix_of(i)], shares if stored else None).flagged:
            return i >= T1
    return False


def change(a, b):
    return lambda i: a if i < T1 else b


Q23, Q12, F8 = (2 / 3, 4), (0.5, 4), (2 / 3, 8)
data = {
    "q 2/3 -> 1/2": (joined(timed(2 / 3, T1), timed(0.5, T2)), change(Q23, Q12)),
    "q 2/3 throughout": (timed(2 / 3, T1 + T2), change(Q23, Q23)),
    "q 1/2 throughout": (timed(0.5, T1 + T2), change(Q12, Q12)),
    "F 4 -> 8 (q 2/3)": (joined(timed(2 / 3, T1), timed(2 / 3, T2, 8)), change(Q23, F8)),
    "F 8 throughout": (timed(2 / 3, T1 + T2, 8), change(F8, F8)),
}
for name, ((late, full), mix_of) in data.items():
    for way, stored in (("configured", False), ("shares", True)):
        n = sum(
            first_flag_after(late[k], full[k], mix_of, stored)
            for k in range(nodes)
            if late[k, T1:].any()
        )
        print(f"{name}, {way}: {n} of {nodes} first flagged in the {T2} rounds after round {T1}")
