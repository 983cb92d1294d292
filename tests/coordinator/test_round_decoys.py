"""Rounds take their decoys from the coordinator's DecoyReservoir, which generates the
next round's decoys in a worker process while the current round is verified and stored."""

from __future__ import annotations

from pathlib import Path

from netcheck.config import DeadlineParams, Profile
from netcheck.coordinator.rounds import run_round
from netcheck.lab.testing import CanaryAnswering, canary_store, running_coordinator
from netcheck.workloads import get_workload

T = 4
PROFILE = Profile(
    name="decoys", engine="torch", model="synth:tiny", dtype="float32", batch_size=8,
    prompt_len=16, max_new_tokens=T, canaries_min=1, canaries_max=1,
    deadline=DeadlineParams(t_ref_s=1.0, a=1.5, slack_s=1.0),
)  # fmt: skip
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}


async def test_next_rounds_decoys_are_generated_ahead_by_a_worker(tmp_path: Path) -> None:
    """After a round the reservoir holds at least the next round's decoys; the next
    round's plan is served entirely from them (nothing generated while planning)."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 50)
    async with running_coordinator(tmp_path, [PROFILE], store=store, decoy_workers=1) as rc:
        rc.start_named({f"n{i}": CanaryAnswering(FP, T) for i in range(3)}, PROFILE.name)
        await rc.wait_connected(3)
        workload = get_workload(PROFILE)
        reservoir = rc.coord.decoys
        calls: list[tuple[int, int]] = []  # (asked, pending before the call)
        take = reservoir.take

        def spy(w: object, n: int) -> list[str]:
            calls.append((n, reservoir.pending(workload)))
            return take(workload, n)

        reservoir.take = spy  # type: ignore[method-assign,assignment]
        first = await run_round(rc.coord, PROFILE.name)
        assert {str(o.verdict) for o in first.outcomes} == {"pass"}
        assert calls and calls[0][1] == 0  # the first round: nothing made ahead yet
        ahead = reservoir.pending(workload)
        assert ahead >= PROFILE.batch_size * 3
        calls.clear()
        second = await run_round(rc.coord, PROFILE.name)
        assert {str(o.verdict) for o in second.outcomes} == {"pass"}
        assert calls and all(asked <= pending for asked, pending in calls), calls
        assert reservoir.pending(workload) >= PROFILE.batch_size * 3
