"""The capacity test across a change of the load probability (EMULATION, session 11):
co-hosted honest nodes late only when their neighbour is loaded too, at exactly p0 = 3%
under the reference mix (q 1/2, every 4th round full). 96 timed rounds at q 2/3, then
the operator moves q to 1/2 and 48 more. Count nodes (not flagged before the switch)
first flagged in the 48 timed rounds after it: judged with the stored per-round q (the
fix) and with the configured mix only (before); baselines: no switch (2/3 throughout,
1/2 throughout). alpha 0.2 so that the counts are large enough to compare (the default
is 0.03).

Run: ``.venv/bin/python benchmarks/capacity_switch.py SEED NODES`` (session 11: seeds 11
and 12 with 20,000 and 40,000 nodes, about a minute each; docs/detection.md, "Capacity
test").
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netcheck.analysis.lateness import CapacityTestConfig, capacity_test, coupled_share  # noqa: E402

rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 11)
nodes, T1, T2, F, alpha = int(sys.argv[2]) if len(sys.argv) > 2 else 20000, 96, 48, 4, 0.2
rate = 0.03 / coupled_share(0.5, 4)
cfgs = {
    q: CapacityTestConfig(p0=0.03, alpha=alpha, load_probability=q, full_every=F)
    for q in (2 / 3, 0.5)
}


def timed(q, n):
    full = rng.random((nodes, n)) < 1 / (1 + (F - 1) * q)
    coupled = full | (rng.random((nodes, n)) < q)
    return coupled & (rng.random((nodes, n)) < rate)


def first_flag_after(row, q_of, cfg_of, stored):
    recent, strikes, rq = [], 0, {}
    for i, hit in enumerate(row):
        recent.insert(0, {"round_id": str(i), "verdict": "late" if hit else "pass"})
        del recent[48:]
        rq[str(i)] = q_of(i)
        if not hit:
            continue
        strikes += 1
        if capacity_test(recent, strikes, cfg_of(i), rq if stored else None).flagged:
            return i >= T1
    return False


scen = {
    "switch, stored q (fix)": (
        np.concatenate([timed(2 / 3, T1), timed(0.5, T2)], 1),
        lambda i: 2 / 3 if i < T1 else 0.5,
        True,
    ),
    "switch, configured q only (before)": (None, lambda i: 2 / 3 if i < T1 else 0.5, False),
    "2/3 throughout": (timed(2 / 3, T1 + T2), lambda i: 2 / 3, True),
    "1/2 throughout": (timed(0.5, T1 + T2), lambda i: 0.5, True),
}
first = scen["switch, stored q (fix)"][0]
for name, (late, q_of, stored) in scen.items():
    late = first if late is None else late
    n = sum(
        first_flag_after(row, q_of, lambda i, q_of=q_of: cfgs[q_of(i)], stored)
        for row in late
        if row[T1:].any()
    )
    print(f"{name}: {n} of {nodes} first flagged in the 48 rounds after round {T1}")
