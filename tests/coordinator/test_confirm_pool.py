"""A confirmation the canary pool cannot cover, in a live coordinator (real loopback
websocket sessions, EMULATED GPU service times): a group whose block the pool cannot
cover is not started or is stopped, and a member that got no canary (``unchecked``, no
job, no timing) stops its run at that round. Neither leaves a ``cleared`` record; a
group never started spends no attempt; a warning names the profile and the build
command (docs/detection.md "Confirmation", new15's finding 1)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from confirm_support import EMPTY, FP, T, emulated_profile

from netcheck.analysis.confirm_run import next_attempt
from netcheck.analysis.detector_config import DetectorConfig, SuspectGroup
from netcheck.analysis.screening import analyse
from netcheck.coordinator import confirm_batches
from netcheck.coordinator.confirm_batches import GroupOutcome, confirm_groups
from netcheck.coordinator.group_flags import started_runs
from netcheck.lab.emulation import EmulatedGPU, EmulatedWorker
from netcheck.lab.testing import (
    CanaryAnswering,
    RunningCoordinator,
    canary_store,
    running_coordinator,
)

PROFILE = emulated_profile("dry")
# confirm_cycles 3 of a pair: a block of 9 rounds loading each member 6 times (12
# canaries at canaries_max 1); the honest pair is not confirmed at its first look and
# would go on to a second block (confirm_max_cycles 6).
FIRST_BLOCK_CANARIES = 12


async def _pair(rc: RunningCoordinator) -> tuple[str, str]:
    """An honest pair (a GPU each), coins off (only the pair draws canaries)."""
    workers = {x: EmulatedWorker(CanaryAnswering(FP, T), EmulatedGPU(0.05)) for x in "ab"}
    names = rc.start_named(workers, PROFILE.name)
    await rc.wait_connected(2)
    rc.coord.screening.config = rc.coord.config.model_copy(
        update={"confirm_cycles": 3, "confirm_max_cycles": 6, "confirm_coins": False}
    )
    return names["a"], names["b"]


async def _confirm(rc: RunningCoordinator, a: str, b: str) -> GroupOutcome:
    (res,) = await confirm_groups(rc.coord.screening, PROFILE, [SuspectGroup((a, b), ())],
                                  EMPTY, analyse(EMPTY, 0.65, DetectorConfig()),
                                  batching=True)  # fmt: skip
    return res


def _state(rc: RunningCoordinator, a: str, b: str) -> tuple[int, int, int]:
    """(flags and records of the profile, stored confirmation rounds, next attempt)."""
    fs = rc.coord.screening.flags
    n_flags = len(fs.list_flags(profile=PROFILE.name, limit=None))
    n_rounds = len(fs.recent_rounds(PROFILE.name, ["confirmation"], 1000).round_ids)
    earlier = rc.coord.screening._shared_flags(PROFILE.name, None)
    return n_flags, n_rounds, next_attempt([a, b], earlier, started_runs(fs, PROFILE.name, [a, b]))


async def test_a_pool_that_runs_out_between_looks_stops_the_run_without_a_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The pool covers the first block, not the second: the run stops after its first
    look, stores no ``cleared`` record (before: 18 rounds, the second block's with 2
    canaries left for 12 member loads, and a cleared record); its 9 rounds with jobs count it as an interrupted attempt (pooled
    into the next). A retry on the empty pool starts no round and spends nothing."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, FIRST_BLOCK_CANARIES + 2)
    caplog.set_level(logging.WARNING, logger="netcheck.screening")
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        a, b = await _pair(rc)
        res = await _confirm(rc, a, b)
        first = _state(rc, a, b)
        again = await _confirm(rc, a, b)
        second = _state(rc, a, b)
    assert first == (0, 9, 2)  # no record; the 9 rounds run count as one attempt
    assert second == first  # no round, no record, no attempt spent
    assert res.run is None and confirm_batches.pool_short(res.reason), res.as_dict()
    entry = res.as_dict()
    assert entry["verdict"] == "not-run" and entry["pool_short"] is True
    assert "netcheck reference build --profile dry" in res.reason
    assert again.run is None and confirm_batches.pool_short(again.reason)
    assert "first block" in again.reason
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("profile dry" in m and "stopped, not judged" in m for m in warnings)
    assert any("profile dry" in m and "not started: no round" in m for m in warnings)


async def test_an_empty_pool_starts_no_confirmation(tmp_path: Path) -> None:
    """Every canary spent before the confirmation (new15's retry): the group is not
    run, no round, no record, no attempt; before, it ran every round unchecked and
    stored a ``cleared`` record each time."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 0)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        a, b = await _pair(rc)
        res = await _confirm(rc, a, b)
        state = _state(rc, a, b)
    assert state == (0, 0, 1)
    assert res.run is None and confirm_batches.pool_short(res.reason)


async def test_a_group_the_pool_sets_aside_keeps_its_place_in_the_waiting_order(
    tmp_path: Path,
) -> None:
    """The budget's wait count of a group not started for an empty pool stays as it was
    (2 analyses), so it is served as early as before once references are built; before,
    its pairs dropped out as if it had been served."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 0)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        a, b = await _pair(rc)
        screening = rc.coord.screening
        screening.waits[PROFILE.name] = {frozenset((a, b)): 2}
        (res,) = await screening.confirm_waiting(PROFILE, [SuspectGroup((a, b), ())], EMPTY,
                                                 analyse(EMPTY, 0.65, DetectorConfig()))  # fmt: skip
        waits = screening.waits[PROFILE.name]
    assert res.run is None and confirm_batches.pool_short(res.reason)
    assert confirm_batches.set_aside([res]) == [0]
    group = SuspectGroup((a, b), ())
    halted = GroupOutcome(
        group, reason=f"{confirm_batches.CANCELLED}; {confirm_batches._NOT_STARTED}"
    )
    budget = GroupOutcome(group, reason="confirmation budget spent")
    left = GroupOutcome(group, reason="1 member(s) not connected")
    assert confirm_batches.set_aside([budget, halted, left]) == [1]
    assert waits == {frozenset((a, b)): 2}


async def test_a_member_without_a_canary_stops_the_run_at_that_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool check misjudges (here switched off; live, screening coins and other runs
    draw from the same pool): the run stops at the first round in which a member got
    no job (``unchecked``), before judging; no record; that round counted."""
    monkeypatch.setattr(confirm_batches, "pool_shortfall", lambda *a, **k: [], raising=False)
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 5)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        a, b = await _pair(rc)
        res = await _confirm(rc, a, b)
        n_flags, n_rounds, _attempt = _state(rc, a, b)
    assert n_flags == 0 and n_rounds < 9  # stopped inside its first block
    assert res.run is None and confirm_batches.pool_short(res.reason), res.as_dict()
    assert "unchecked" in res.reason
    assert res.unchecked_rounds == 1 and res.as_dict()["unchecked_rounds"] == 1


def test_screen_run_reports_a_confirmation_the_pool_cut_short(tmp_path: Path) -> None:
    """``screen run`` prints the group as cut short by the canary pool with its
    unchecked rounds and exits 8 naming the build command, in text and with --json; a
    run whose confirmation was not cut short exits 0."""
    from click.testing import CliRunner

    from netcheck.cli import main
    from netcheck.coordinator import commands
    from netcheck.exitcodes import Exit

    short = {"group": ["ed25519:a", "ed25519:b"], "verdict": "not-run", "pool_short": True,
             "unchecked_rounds": 3,
             "reason": "reference pool too small for profile dry (round r9: 1 member(s) "
                       "unchecked, no canary): ..."}  # fmt: skip
    plain = {"group": ["ed25519:a", "ed25519:b"], "verdict": "cleared", "flags": [],
             "attempt": 1, "flag_ids": [4]}  # fmt: skip
    reports = [
        {"profile": "dry", "rounds": [], "flags": [], "confirmations": [short]},
        {"profile": "dry", "rounds": [], "flags": [], "confirmations": [short]},
        {"profile": "dry", "rounds": [], "flags": [], "confirmations": [plain]},
    ]

    def fake_job(config: object, body: dict[str, object], held: dict[str, object]) -> object:
        return {"state": "done", "report": reports.pop(0)}

    mp = pytest.MonkeyPatch()
    mp.setattr(commands, "run_job", fake_job)
    try:
        runner = CliRunner()
        cfg = tmp_path / "c.toml"
        cfg.write_text("")
        run = ["screen", "run", "--config", str(cfg)]
        text = runner.invoke(main, run)
        as_json = runner.invoke(main, [*run, "--json"])
        fine = runner.invoke(main, run)
    finally:
        mp.undo()
    assert text.exit_code == as_json.exit_code == int(Exit.NOTHING_CHECKED), text.output
    out = " ".join(text.output.split())
    assert (
        "cut short by the canary pool, no cleared record (3 confirmation round(s) with a member unchecked)"
        in out
    )
    for res in (text, as_json):
        msg = " ".join(res.output.split())
        assert "1 suspect group(s) not judged" in msg and "3 confirmation round(s)" in msg
        assert "reference build --profile dry" in msg
    assert fine.exit_code == 0, fine.output


def test_screen_run_reports_slowness_nominees_the_pool_left_unjudged(tmp_path: Path) -> None:
    """A report whose alone stage the canary pool cut short (``alone_pool_short``)
    prints the nominee and exits 8 naming the build command, as a suspect group's
    confirmation cut short does (before session 16 the stage ran its rounds unchecked
    and the run exited 0)."""
    from click.testing import CliRunner

    from netcheck.cli import main
    from netcheck.coordinator import commands
    from netcheck.exitcodes import Exit

    dry = {"node": "ed25519:slow", "unchecked_rounds": 1,
           "reason": "reference pool too small for profile dry (round r3: unchecked, no canary)"}  # fmt: skip
    report = {"profile": "dry", "rounds": [], "flags": [], "confirmations": [],
              "alone_pool_short": [dry]}  # fmt: skip
    mp = pytest.MonkeyPatch()
    mp.setattr(commands, "run_job", lambda *a: {"state": "done", "report": report})
    try:
        cfg = tmp_path / "c.toml"
        cfg.write_text("")
        res = CliRunner().invoke(main, ["screen", "run", "--config", str(cfg)])
    finally:
        mp.undo()
    assert res.exit_code == int(Exit.NOTHING_CHECKED), res.output
    text = " ".join(res.output.split())
    assert "slowness nominee ed25519:slow: alone rounds cut short by the canary pool" in text
    assert "1 slowness nominee(s) confirmed alone not judged" in text
    assert "reference build --profile dry" in text
