"""The screening timer keeps going when an after-round check has a bug (raises
something other than a storage error): ``Screening.tick`` logs it and returns, as its
docstring promises. Before, the exception left ``tick`` and ended the timer task for
good (screening stopped until a restart, with no error logged until the task was
collected). Live coordinator, MadeUpWorker nodes."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from test_screening_live import FP, T, _join
from test_screening_live import PROFILE as LIVE

from netcheck.config import Profile
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import canary_store, running_coordinator
from netcheck.records import NodeOutcome, NodeRecord, RoundPlan


async def test_a_bug_in_an_after_round_check_does_not_stop_the_timer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = canary_store(tmp_path / "netcheck.db", LIVE, FP, 200, answer=(1,) * T)
    async with running_coordinator(tmp_path, [LIVE], store=store) as rc:
        await _join(rc, {f"n{i}": MadeUpWorker(FP, T) for i in range(2)})
        ran: list[str] = []

        async def buggy(p: Profile, plan: RoundPlan, o: Sequence[NodeOutcome],
                        r: Mapping[str, NodeRecord], *, strict: bool = False) -> list[int]:  # fmt: skip
            ran.append(plan.round_id)
            raise ZeroDivisionError("a bug in a check (test)")

        rc.coord.round_hooks.after_round.append(buggy)
        screening = rc.coord.screening
        await screening.tick()  # logged, not raised
        assert len(ran) == 1
        assert any("ZeroDivisionError" in (r.exc_text or "") or r.exc_info for r in caplog.records
                   if r.levelname == "ERROR")  # fmt: skip

        async def fast(_s: float) -> None:
            await asyncio.sleep(0.01)

        screening.start_timer(fast)
        for _ in range(500):
            if len(ran) >= 3:
                break
            await asyncio.sleep(0.02)
        timer = screening.timer.task
        await screening.stop_timer()
        assert len(ran) >= 3, "the timer stopped after the first failing round"
        assert timer is not None
