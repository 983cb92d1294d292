"""Who is blamed when a node gets no canary: the node (profile-mismatch) or the operator."""

from __future__ import annotations

from pathlib import Path

from netcheck.coordinator.rounds import run_round
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import canary_store, running_coordinator, small_profile
from netcheck.storage import Store

PROFILE = small_profile("pool", dispatch_timeout_s=2.0, result_timeout_s=3.0)
NODE_FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "11" * 32}
OTHER_FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "22" * 32}


def store_with(tmp_path: Path, fp: dict[str, str | int], n: int) -> Store:
    answer = range(PROFILE.max_new_tokens)
    return canary_store(tmp_path / "netcheck.db", PROFILE, fp, n, answer=answer)


async def one_verdict(tmp_path: Path, store: Store) -> tuple[str, str]:
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.start(rc.node(MadeUpWorker(NODE_FP, PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1)
        report = await run_round(rc.coord, PROFILE.name)
    (outcome,) = report.outcomes
    return str(outcome.verdict), outcome.reason


async def test_unknown_fingerprint_is_profile_mismatch(tmp_path: Path) -> None:
    """References exist for the profile but not for the node's fingerprint: its fault."""
    verdict, _ = await one_verdict(tmp_path, store_with(tmp_path, OTHER_FP, 8))
    assert verdict == "profile-mismatch"


async def test_no_reference_set_is_unchecked(tmp_path: Path) -> None:
    """No references for the profile at all: the operator's fault, not the node's."""
    verdict, reason = await one_verdict(tmp_path, store_with(tmp_path, OTHER_FP, 0))
    assert verdict == "unchecked"
    assert "netcheck reference build --profile pool" in reason


async def test_used_up_pool_is_unchecked(tmp_path: Path) -> None:
    """The node's fingerprint had references, all spent: unchecked, with a hint."""
    store = store_with(tmp_path, NODE_FP, 1)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.start(rc.node(MadeUpWorker(NODE_FP, PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1)
        first = await run_round(rc.coord, PROFILE.name)
        second = await run_round(rc.coord, PROFILE.name)
    assert str(first.outcomes[0].verdict) == "wrong-answer"  # made-up tokens, checked
    assert str(second.outcomes[0].verdict) == "unchecked"
    assert "used up" in second.outcomes[0].reason
