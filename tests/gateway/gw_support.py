"""Shared setup of the gateway tests: a cheap profile, emulated nodes, a cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from netcheck.config import DeadlineParams, Profile
from netcheck.testing import RunningCoordinator

PROFILE = Profile(
    name="gw-test",
    engine="torch",
    model="synth:tiny",
    dtype="float32",
    batch_size=4,
    prompt_len=32,
    max_new_tokens=6,
    canaries_min=1,
    canaries_max=2,
    deadline=DeadlineParams(t_ref_s=1.0, slack_s=2.0),
    dispatch_timeout_s=4.0,
    result_timeout_s=8.0,
)

#: Fast timeouts so a test does not wait for a gateway that is gone.
FAST = {"join_timeout_s": 8.0, "close_grace_s": 1.0, "release_margin_s": 0.2}


async def until(check: Callable[[], bool | Awaitable[bool]], timeout_s: float = 20.0) -> None:
    """Poll ``check`` every 50 ms until true (fails the test after ``timeout_s``)."""
    async with asyncio.timeout(timeout_s):
        while True:
            v = check()
            if not isinstance(v, bool):
                v = await v
            if v:
                return
            await asyncio.sleep(0.05)


async def leader_of(*gws: RunningCoordinator) -> RunningCoordinator:
    """The running gateway that holds the leader lock (waits for one)."""
    await until(lambda: any(g.coord.control.is_leader for g in gws))  # type: ignore[attr-defined]
    return next(g for g in gws if g.coord.control.is_leader)  # type: ignore[attr-defined]
