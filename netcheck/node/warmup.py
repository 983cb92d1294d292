"""Warm-up of a freshly loaded engine, before the node joins.

The first batch on a fresh process pays one-time costs: on a GPU the CUDA context and
cuBLAS handles, kernel selection and the caching allocator growing to the batch's size;
on a CPU thread pools and page faults. Profiles are calibrated the same way:
``netcheck engine calibrate`` measures ``t_ref`` after one untimed warm-up batch
(netcheck/engines/calibrate.py), so a node whose first round is its first batch is
measured against a time it cannot meet on that round. :func:`warm_up` runs full batches
of fresh prompts of the profile's workload (answers discarded) and :func:`assess`
compares the last batch's time with the profile's deadline, so that a node operator
learns at start that a card is too slow, instead of from ``late`` verdicts.
Measured first-batch costs (``benchmarks/first_batch.py``): cpu-tiny on the 2-core
development machine 0.39, 0.37, 0.37, 0.32 s for the first four batches; on an H200,
h200-torch-bf16 2.746 s for the first batch, then 2.197-2.232 s (the first is 1.24x the
warm median and over the 2.458 s deadline the profile had before its co-hosting
allowance, 2.945 s with it: docs/calibration/README.md). So the
node's default is two warm-up batches, and a single warm-up batch, which is the cold
one, is never taken as proof that the card is too slow.

"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

from netcheck.config import Profile
from netcheck.node.workers import Worker
from netcheck.workloads import get_workload

#: A warm batch slower than this times the profile's t_ref gets a warning.
SLOW_FACTOR = 1.2


@dataclass(frozen=True)
class WarmUp:
    """Seconds per warm-up batch, in order, and what they mean for the profile."""

    batch_s: tuple[float, ...]
    level: int  #: a ``logging`` level: INFO, WARNING or ERROR
    message: str


async def warm_up(worker: Worker, profile: Profile, batches: int) -> tuple[float, ...]:
    """Run ``batches`` full batches (``profile.batch_size`` fresh prompts each, from a
    stream seeded with ``os.urandom``) on ``worker``; returns each batch's wall time in
    seconds. ``batches = 0`` returns ``()`` at once.

    Raises:
        EngineError: the engine failed on a batch.
    """
    stream = get_workload(profile).generator(os.urandom(16))
    times = []
    for _ in range(batches):
        prompts = stream.prompts(profile.batch_size)
        t0 = time.perf_counter()
        await worker.run(prompts)
        times.append(time.perf_counter() - t0)
    return tuple(times)


def assess(batch_s: tuple[float, ...], profile: Profile) -> WarmUp:
    """What the last warm-up batch says about this card under ``profile``:

    - ERROR when it is over the deadline at zero round-trip time
      (``profile.deadline_s(0)``): every round would be ``late``; but WARNING when it
      is the only batch, since the first batch carries one-time costs;
    - WARNING when it is over ``SLOW_FACTOR`` x ``t_ref_s`` (the reference card's
      batch time): slower than the card the profile was measured on;
    - INFO otherwise.
    """
    if not batch_s:
        return WarmUp(batch_s, logging.INFO, "no warm-up batch (warmup_batches = 0)")
    last = batch_s[-1]
    deadline = profile.deadline_s(0.0)
    t_ref = profile.deadline.t_ref_s
    times = ", ".join(f"{t:.2f}" for t in batch_s)
    if last > deadline and len(batch_s) == 1:
        return WarmUp(
            batch_s, logging.WARNING,
            f"the one warm-up batch took {times} s, over the profile's deadline of "
            f"{deadline:.2f} s (t_ref {t_ref:.2f} s); a first batch carries one-time costs "
            f"(+24% on an H200), so set warmup_batches >= 2 to judge a warm batch",
        )  # fmt: skip
    if last > deadline:
        return WarmUp(
            batch_s, logging.ERROR,
            f"warm-up batches took {times} s: the last is over the profile's deadline of "
            f"{deadline:.2f} s (t_ref {t_ref:.2f} s), so every round would be late: this "
            f"card or engine is too slow for profile {profile.name}",
        )  # fmt: skip
    if last > SLOW_FACTOR * t_ref:
        return WarmUp(
            batch_s, logging.WARNING,
            f"warm-up batches took {times} s: the last is {last / t_ref:.2f}x the "
            f"profile's reference batch time t_ref {t_ref:.2f} s (deadline {deadline:.2f} s)",
        )  # fmt: skip
    return WarmUp(
        batch_s, logging.INFO,
        f"warm-up batches took {times} s (t_ref {t_ref:.2f} s, deadline {deadline:.2f} s)",
    )  # fmt: skip
