#!/usr/bin/env python3
"""CPU time (``time.process_time``, so other processes' load matters less than for wall
time) of the coordinator's per-round work that issue 11 changed, for this checkout and,
with --baseline DIR, another one (e.g. main before the change), in the same run:

- opening one H200-sized result frame (B = 240 x 32 ids < 128,256: decrypt, decode,
  validate) and checking it (commitment, receipt signature);
- checking one compute-probe answer (``probe.answer`` per probe before; one batched
  ``probe.answers`` per round after, where available);
- planning 1,000 nodes of cpu-tiny (``plan_round``, pure: decoys and canary draws).

    .venv/bin/python benchmarks/coordinator_cpu.py --baseline /tmp/netcheck-main
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, random, secrets, time
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from netcheck.config import load_profile
from netcheck.coordinator.planner import plan_round, PlanNode
from netcheck.coordinator.session import receive_limits
from netcheck.engines import probe
from netcheck.keys import public_key_bytes
from netcheck.protocol.jobs import commitment, sign_receipt, verify_receipt
from netcheck.protocol.messages import Result
from netcheck.protocol.states import Role
from netcheck.protocol.transport import Transport
try:
    from netcheck.storage.tables import ReferenceRow
except ImportError:
    from netcheck.records import ReferenceRow

def cpu(f, n):
    t = time.process_time()
    for _ in range(n):
        f()
    return (time.process_time() - t) / n

out = {}
h200 = load_profile("h200-torch-bf16")
k1, k2, sid = secrets.token_bytes(32), secrets.token_bytes(32), secrets.token_bytes(16)
node, coord = Transport(Role.NODE, k1, k2, sid), Transport(Role.COORDINATOR, k2, k1, sid)
coord.limit_receive(receive_limits(h200))
key = Ed25519PrivateKey.generate()
rng = random.Random(1)
outs = tuple(tuple(rng.randrange(128256) for _ in range(32)) for _ in range(240))
c = commitment(outs)
msg = Result(round_id="r1", outputs=outs, commitment=c, signature=sign_receipt(key, sid, "r1", c))
frames = [node.seal(msg) for _ in range(200)]
it = iter(frames)
def open_and_check():
    m = coord.open(next(it))
    assert commitment(m.outputs) == m.commitment
    assert verify_receipt(public_key_bytes(key), m.signature, sid, "r1", m.commitment)
out["result_open_check_ms"] = 1e3 * cpu(open_and_check, 200)
chs = [secrets.token_bytes(32) for _ in range(300)]
out["probe_check_us_single"] = 1e6 * cpu(lambda: [probe.answer(x) for x in chs], 1) / 300
if hasattr(probe, "answers"):
    out["probe_check_us_batched"] = 1e6 * cpu(lambda: probe.answers(chs), 1) / 300
tiny = load_profile("cpu-tiny")
nodes = [PlanNode(f"k{i}", "fp") for i in range(1000)]
pool = {"fp": [ReferenceRow(f"r{i}", tiny.name, "fp", f"prompt {i}", (1,) * tiny.max_new_tokens, 0.0)
               for i in range(12000)]}
out["plan_1000_cpu_s"] = cpu(lambda: plan_round("r1", nodes, pool, tiny, random.Random(2)), 1)
print(json.dumps(out))
"""


def measure(code_dir: Path) -> dict[str, float]:
    # carried wheels (device machine) stay on the path, behind the code under test
    path = [str(code_dir), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        cwd=code_dir,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--baseline", type=Path, help="another checkout to compare (e.g. main)")
    args = ap.parse_args()
    rows = {"this": measure(ROOT)}
    if args.baseline:
        rows["baseline"] = measure(args.baseline)
    keys = sorted({k for r in rows.values() for k in r})
    print("| figure (CPU time) | " + " | ".join(rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for k in keys:
        cells = [f"{r[k]:.3g}" if k in r else "–" for r in rows.values()]
        print(f"| {k} | " + " | ".join(cells) + " |")
    print(f"load average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
