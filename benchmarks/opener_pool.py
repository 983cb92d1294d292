#!/usr/bin/env python3
"""What a process pool would save the coordinator's loop thread per H200-sized result
(docs/kernel-stamps.md, "Frame opener: threads or processes").

Prints the median time of opening and checking one result in-thread (what the
FrameOpener thread does while holding the GIL for most of it) next to the pickle round
trip a process pool would add (``loads`` on the loop thread, ``dumps`` in the worker).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/opener_pool.py
"""

from __future__ import annotations

import os
import pickle
import random
import statistics
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.coordinator.arrivals import open_frame
from netcheck.keys import public_key_bytes
from netcheck.protocol.jobs import commitment, sign_receipt, verify_receipt
from netcheck.protocol.messages import Result
from netcheck.protocol.states import Role
from netcheck.protocol.transport import Transport

K1, K2, SID = bytes(range(32)), bytes(range(32, 64)), bytes(range(16))
N = 300


def med_us(xs: list[float]) -> float:
    return statistics.median(xs) * 1e6


def main() -> None:
    node, coord = Transport(Role.NODE, K1, K2, SID), Transport(Role.COORDINATOR, K2, K1, SID)
    key = Ed25519PrivateKey.generate()
    pk = public_key_bytes(key)
    outs = tuple(tuple(random.randrange(128256) for _ in range(32)) for _ in range(240))
    c = commitment(outs)
    sig = sign_receipt(key, SID, "r1", c)
    result = Result(round_id="r1", outputs=outs, commitment=c, signature=sig)
    frames = [node.seal(result) for _ in range(N)]
    t_open, t_dumps, t_loads, t_t, t_c, t_v = [], [], [], [], [], []
    blob = b""
    for f in frames:
        t0 = time.perf_counter()
        opened = open_frame(coord, f, pk)
        t1 = time.perf_counter()
        blob = pickle.dumps(opened.message, protocol=5)
        t2 = time.perf_counter()
        pickle.loads(blob)
        t3 = time.perf_counter()
        t_open.append(t1 - t0)
        t_dumps.append(t2 - t1)
        t_loads.append(t3 - t2)
    node2, coord2 = Transport(Role.NODE, K1, K2, SID), Transport(Role.COORDINATOR, K2, K1, SID)
    for f in [node2.seal(result) for _ in range(100)]:
        t0 = time.perf_counter()
        msg = coord2.open(f)
        t1 = time.perf_counter()
        assert isinstance(msg, Result)
        commitment(msg.outputs)
        t2 = time.perf_counter()
        verify_receipt(pk, msg.signature, SID, "r1", msg.commitment)
        t3 = time.perf_counter()
        t_t.append(t1 - t0)
        t_c.append(t2 - t1)
        t_v.append(t3 - t2)
    print(f"frame {len(frames[0])} B; load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    print(f"open + check in-thread: {med_us(t_open):.0f} us median "
          f"(Transport.open {med_us(t_t):.0f}, commitment {med_us(t_c):.0f}, "
          f"verify {med_us(t_v):.0f})")  # fmt: skip
    print(f"process pool would add: loads on the loop thread {med_us(t_loads):.0f} us, "
          f"dumps in the worker {med_us(t_dumps):.0f} us ({len(blob)} B pickled); "
          f"ratio open/loads {statistics.median(t_open) / statistics.median(t_loads):.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
