"""netcheck.coordinator.late_checks: a bug (an unexpected exception) in a round's own
after-round checks, in a live coordinator (real loopback websocket sessions, made-up
answers). The round's results are recorded, so its report goes out; the failure is
logged at ERROR with the round id and listed in ``GET /admin/status``; the round's
checks are kept in the spool, tried again before later rounds up to ``BUG_TRIES`` times
per process (later rounds checked meanwhile, none refused), and run by the next start.
Before session 16 the bug failed the round's request although its results were stored,
and its checks were lost."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from test_pool_surfaces import get
from test_screening_live import FP, PROFILE, T, _join

from netcheck.config import Profile
from netcheck.coordinator.late_checks import BUG_TRIES, check_bugs
from netcheck.coordinator.rounds import run_round
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import canary_store, running_coordinator
from netcheck.records import NodeOutcome, NodeRecord, RoundPlan


class Checks:
    """An after-round hook recording the rounds it checks; raises a bug (KeyError) for
    the first round it sees while ``broken``."""

    def __init__(self, broken: bool = True, bad: str | None = None) -> None:
        self.broken, self.bad, self.seen = broken, bad, list[str]()

    async def __call__(self, p: Profile, plan: RoundPlan, o: Sequence[NodeOutcome],
                       r: Mapping[str, NodeRecord], *, strict: bool = False) -> list[int]:  # fmt: skip
        self.seen.append(plan.round_id)
        self.bad = self.bad or plan.round_id
        if self.broken and plan.round_id == self.bad:
            raise KeyError("a bug in a check (test)")
        return []


async def test_a_bug_in_a_rounds_own_checks_keeps_its_report_and_its_checks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Round 1's checks raise: its report comes back ``complete``; an ERROR with its id
    and the trace; ``/admin/status`` lists it; its checks wait in the spool. Rounds 2-5
    run and are checked; round 1's are tried before them, 3 times in all in this
    process, then left for the next start, which (bug fixed) runs them once."""
    caplog.set_level(logging.ERROR, logger="netcheck.round")
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 200, answer=(1,) * T)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        await _join(rc, {f"n{i}": MadeUpWorker(FP, T) for i in range(2)})
        checks = Checks()
        rc.coord.round_hooks.after_round.append(checks)
        first = await run_round(rc.coord, PROFILE.name)  # before: raised KeyError
        r1 = first.round_id
        assert first.status == "complete" and len(first.outcomes) == 2
        errors = [r for r in caplog.records if r.levelname == "ERROR" and r1 in r.getMessage()]
        assert errors and errors[0].exc_info is not None
        assert "KeyError" in errors[0].getMessage()
        (bug,) = (await get(rc, "/admin/status"))["after_round_check_bugs"]
        assert (bug["round_id"], bug["tries"], bug["given_up"]) == (r1, 1, False)
        assert [r.round_id for r in rc.coord.recorder.unchecked()] == [r1]
        later = [(await run_round(rc.coord, PROFILE.name)).round_id for _ in range(4)]
        assert checks.seen.count(r1) == BUG_TRIES  # then left for the next start
        assert all(rid in checks.seen for rid in later)  # every later round checked
        assert [b.round_id for b in check_bugs(rc.coord)] == [r1]
        assert check_bugs(rc.coord)[0].given_up
        assert [r.round_id for r in rc.coord.recorder.unchecked()] == [r1]
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        fixed = Checks(broken=False)
        rc.coord.round_hooks.after_round.append(fixed)
        await rc.coord.recover()
        assert fixed.seen == [r1]
        assert rc.coord.recorder.unchecked() == [] and check_bugs(rc.coord) == []
    store.close()
