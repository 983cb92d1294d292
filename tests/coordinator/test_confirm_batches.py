"""Disjoint suspect groups confirmed in shared rounds by a live coordinator (real
loopback websocket sessions, EMULATED GPU service times): shared load sets, per-run
contexts read back as pooled evidence, flags per run, a node leaving, and the switch
back to one group at a time (docs/confirmation-batches.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from budget_support import budget_groups, run_budget_analyses, run_budget_case
from confirm_support import EMPTY, FP, T, emulated_profile

from netcheck.analysis.coins import COIN_RULE, held_nodes
from netcheck.analysis.confirm_batch import context_parts
from netcheck.analysis.confirm_budget import BUDGET_SPENT
from netcheck.analysis.confirm_run import next_attempt
from netcheck.analysis.detector_config import DetectorConfig, SuspectGroup
from netcheck.analysis.schedule import screening_plan
from netcheck.analysis.screening import analyse
from netcheck.coordinator.confirm_batches import confirm_groups
from netcheck.coordinator.group_flags import started_runs
from netcheck.coordinator.jobs import ConfirmProgress
from netcheck.lab.emulation import EmulatedGPU, EmulatedWorker
from netcheck.lab.testing import (
    CanaryAnswering,
    RunningCoordinator,
    canary_store,
    running_coordinator,
)

PROFILE = emulated_profile("batch")


class Leaving(EmulatedWorker):
    """EMULATED GPU; its node leaves (its client task is cancelled) at its ``at``-th batch."""

    def __init__(self, gpu: EmulatedGPU, at: int) -> None:
        super().__init__(CanaryAnswering(FP, T), gpu)
        self.at = at
        self.calls = 0
        self.leave: Callable[[], object] = lambda: None

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        self.calls += 1
        if self.calls == self.at:
            self.leave()
        return await super().run(prompts)


async def _start(
    rc: RunningCoordinator, leave_at: int = 0, budget: int = 0, service_s: float = 0.1
) -> dict[str, str]:
    """Farm a, b on one GPU of ``service_s`` per batch (beta 1); honest c, d with a GPU
    each; with ``leave_at``, d leaves at its ``leave_at``-th batch; with ``budget``,
    confirmation runs within that many rounds per analysis and without screening coins.
    A test whose expectations need the farm confirmed at its first look (9 rounds) uses a
    longer ``service_s``: on a loaded machine the event loop's delays are noise of
    ~0.1 s, and at 0.1 s the pair then stayed unconfirmed in 2 of 4 runs."""
    farm = EmulatedGPU(service_s, beta=1.0)
    workers = {x: EmulatedWorker(CanaryAnswering(FP, T), farm) for x in "ab"}
    workers["c"] = EmulatedWorker(CanaryAnswering(FP, T), EmulatedGPU(service_s))
    leaving = Leaving(EmulatedGPU(service_s), leave_at or 10**9)
    workers["d"] = leaving
    names = rc.start_named(workers, PROFILE.name)
    leaving.leave = rc.nodes[-1].cancel
    await rc.wait_connected(4)
    rc.coord.screening.config = rc.coord.config.model_copy(
        update={"confirm_cycles": 3, "confirm_max_cycles": 6, "confirm_coins": True}
    )
    if budget:
        rc.coord.screening.config = rc.coord.screening.config.model_copy(
            update={"confirm_coins": False, "confirm_budget_rounds": budget}
        )
    return names


class Recorded(ConfirmProgress):
    """A job's confirmation progress that keeps every value it was set to."""

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        self.__dict__.setdefault("seen", []).append((name, value))


async def _confirm(rc: RunningCoordinator, names: dict[str, str], batching: bool,  # type: ignore[no-untyped-def]
                   progress: ConfirmProgress | None = None):  # fmt: skip
    groups = [
        SuspectGroup((names["a"], names["b"]), ()),
        SuspectGroup((names["c"], names["d"]), ()),
    ]
    return await confirm_groups(rc.coord.screening, PROFILE, groups, EMPTY,
                                analyse(EMPTY, 0.65, DetectorConfig()), batching=batching,
                                progress=progress)  # fmt: skip


def _rounds(rc: RunningCoordinator) -> list[tuple[set[str], dict]]:  # type: ignore[type-arg]
    """Stored confirmation rounds: (planned set, context), oldest first; the planned set
    is the loaded set without the screening coins (docs/screening-in-confirmation.md):
    the loaded nodes among the round's held nodes."""
    stored = rc.coord.screening.flags.recent_rounds(PROFILE.name, ["confirmation"], 1000)
    out = []
    for r in stored.round_ids:
        loaded = {k for k, on in stored.schedules[r].items() if on}
        held = held_nodes(stored.contexts[r])
        assert held is not None  # _start turns coins on
        out.append((loaded & held, stored.contexts[r]))
    return out


async def test_disjoint_groups_share_rounds_and_are_judged_apart(tmp_path: Path) -> None:
    """A farm pair and an honest pair confirmed in one batch: each shared round loads
    the union of the runs' parts and records each part; fewer rounds than the two runs'
    rounds together; the farm is flagged, the honest pair cleared, each on its own
    members' rounds; a later attempt reads back only its own group's parts. The job's
    progress counted every round and showed both groups under test, then settled."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 2000)
    progress = Recorded()
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        names = await _start(rc)
        farm, honest = await _confirm(rc, names, batching=True, progress=progress)
        rounds = _rounds(rc)
        screening = rc.coord.screening
        sched: dict[str, dict[str, bool]] = {}
        prior = screening._prior_observations(PROFILE.name, [names["c"], names["d"]], 0.65, sched)
    a, b, c, d = (names[x] for x in "abcd")
    assert farm.run is not None and farm.run.flags == [(a, b)] and len(farm.ids) == 1
    assert honest.run is not None and honest.run.verdict == "cleared" and len(honest.ids) == 1
    own = len(farm.run.observations) + len(honest.run.observations)
    assert len(rounds) == max(len(farm.run.observations), len(honest.run.observations)) < own
    assert any(loaded & {a, b} and loaded & {c, d} for loaded, _ in rounds)
    for loaded, ctx in rounds:
        parts = context_parts(ctx, frozenset(loaded))
        assert set().union(*(p.loaded for p in parts)) == loaded
        assert {p.tested for p in parts} <= {frozenset({a, b}), frozenset({c, d})}
    assert all(o.loaded <= {a, b} and set(o.log_service) <= {a, b} for o in farm.run.observations)
    assert all(o.loaded <= {c, d} for o in honest.run.observations)
    assert len(prior) == len(honest.run.observations)
    assert progress.rounds_done == len(rounds) and progress.stage == "groups"
    assert (progress.groups_total, progress.groups_active, progress.groups_done) == (2, 0, 2)
    assert ("groups_active", 2) in progress.__dict__["seen"]
    assert all(o.loaded <= {c, d} and o.tested == {c, d} and set(o.log_service) <= {c, d}
               for o in prior)  # fmt: skip


async def test_a_node_leaving_stops_only_its_own_run(tmp_path: Path) -> None:
    """d leaves during the first look: the honest pair's run stops before judging (no
    record; its stored rounds still count as an attempt of the pair), its members are
    loaded no more, and the farm's run completes and is flagged."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 2000)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        names = await _start(rc, leave_at=2)
        farm, honest = await _confirm(rc, names, batching=True)
        rounds = _rounds(rc)
        a, b, c, d = (names[x] for x in "abcd")
        started = started_runs(rc.coord.screening.flags, PROFILE.name, [c, d])
    assert next_attempt([c, d], [], started) == 2
    assert farm.run is not None and farm.run.flags == [(a, b)]
    assert honest.run is None and honest.ids == [] and "left" in honest.reason
    assert honest.as_dict()["verdict"] == "not-run"
    last_cd = max(i for i, (loaded, _) in enumerate(rounds) if loaded & {c, d})
    assert last_cd < len(rounds) - 1  # later rounds load the farm only
    assert all(not loaded & {c, d} for loaded, _ in rounds[last_cd + 1 :])


async def test_without_batching_groups_run_one_at_a_time(tmp_path: Path) -> None:
    """``confirm_batching = false``: no round loads members of two groups; the farm's
    rounds all come before the honest pair's."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 2000)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        names = await _start(rc)
        farm, honest = await _confirm(rc, names, batching=False)
        rounds = _rounds(rc)
    a, b, c, d = (names[x] for x in "abcd")
    assert farm.run is not None and farm.run.flags == [(a, b)]
    assert honest.run is not None and honest.run.verdict == "cleared"
    owner = ["farm" if loaded <= {a, b} else "honest" for loaded, _ in rounds]
    assert all(loaded <= {a, b} or loaded <= {c, d} for loaded, _ in rounds)
    assert owner == sorted(owner)  # "farm" < "honest"
    assert len(rounds) == len(farm.run.observations) + len(honest.run.observations)


async def test_confirmation_rounds_give_the_other_nodes_screening_coins(tmp_path: Path) -> None:
    """One group (the farm a, b) under confirmation, honest c, d in no group: every round
    holds a, b (loaded by plan only) and loads c, d by their screening coins (each in
    some rounds, not in others; the stored bits are the HMAC schedule's); the rounds are
    stored with the coin rule, which is how the screening read finds them, and the
    analysis reads c, d's cells and not a, b's. ``confirm_coins = false``: the rounds
    load the group only (c, d as a second group)."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 2000)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        names = await _start(rc)
        a, b, c, d = (names[x] for x in "abcd")
        screening = rc.coord.screening
        farm = SuspectGroup((a, b), ())
        await confirm_groups(screening, PROFILE, [farm], EMPTY,
                             analyse(EMPTY, 0.65, DetectorConfig()), batching=True)  # fmt: skip
        coin = screening.flags.recent_rounds(PROFILE.name, [], 1000,
                                             kind_rules=[("confirmation", COIN_RULE)])  # fmt: skip
        other = screening.flags.recent_rounds(PROFILE.name, [], 1000,
                                              kind_rules=[("confirmation", "explicit")])  # fmt: skip
        screening.config = screening.config.model_copy(update={"confirm_coins": False})
        await confirm_groups(screening, PROFILE, [SuspectGroup((c, d), ())], EMPTY,
                             analyse(EMPTY, 0.65, DetectorConfig()), batching=True)  # fmt: skip
        plain = screening.flags.recent_rounds(PROFILE.name, [], 1000,
                                              kind_rules=[("confirmation", "explicit")])  # fmt: skip
    assert len(coin.round_ids) >= 9 and other.round_ids == ()
    for rid in coin.round_ids:
        assert held_nodes(coin.contexts[rid]) == {a, b}
        bits = screening_plan(screening.secret, rid, [c, d])
        assert {k: coin.schedules[rid][k] for k in (c, d)} == bits
    for k in (c, d):
        assert 0 < sum(coin.schedules[r][k] for r in coin.round_ids) < len(coin.round_ids)
    mat = analyse(coin, 0.65, DetectorConfig()).matrix
    observed = {key: int(np.isfinite(mat.y[i]).sum()) for i, key in enumerate(mat.node_keys)}
    assert observed[a] == observed[b] == 0 and observed[c] > 0 and observed[d] > 0
    assert plain.round_ids and all(
        {k for k, on in plain.schedules[r].items() if on} <= {c, d} for r in plain.round_ids
    )


async def test_budget_serves_the_strongest_groups_first_as_the_simulator_does(
    tmp_path: Path,
) -> None:
    """``confirm_budget_rounds = 9`` (a pair's first look at 3 cycles) and three
    nominations in detector order c-a (largest z, at the floor), a-b (the farm, far above
    it), c-d: a-b and c-d start first and share the 9 rounds, c-a is not run (reason
    ``confirmation budget spent``: no round, no record, so its next attempt is still the
    first), a-b's attempt counts. The simulator, on the same nominations by role,
    starts the same groups in the same order, runs as many rounds and leaves the same
    group unserved (tests/lab/sim/test_sim_confirm_budget.py)."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 2000)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        names = await _start(rc, budget=9, service_s=0.4)
        screening = rc.coord.screening
        groups = budget_groups(names)
        outcomes = await confirm_groups(screening, PROFILE, groups, EMPTY,
                                        analyse(EMPTY, 0.65, DetectorConfig()), batching=True)  # fmt: skip
        rounds = _rounds_plain(rc)
        a, b, c, d = (names[x] for x in "abcd")
        earlier = screening._shared_flags(PROFILE.name, None)
        started = started_runs(screening.flags, PROFILE.name, [a, b, c, d])
    back = {k: x for x, k in names.items()}
    weak, farm, honest = outcomes
    assert weak.run is None and weak.reason == BUDGET_SPENT and weak.ids == []
    assert weak.as_dict()["verdict"] == "not-run"
    assert farm.run is not None and honest.run is not None
    assert len(rounds) == 9
    assert all({frozenset(e["group"]) for e in ctx["runs"]} == {frozenset({a, b}), frozenset({c, d})}
               for _, ctx in rounds)  # fmt: skip
    first = [{back[k] for k in e["group"]} for e in rounds[0][1]["runs"]]
    assert next_attempt([c, a], earlier, started) == 1  # the unserved group spent nothing
    assert next_attempt([a, b], earlier, started) == 2
    sim_started, sim_rounds, sim_unserved, _ = run_budget_case(9)
    assert first == sim_started == [{"a", "b"}, {"c", "d"}]
    assert sim_rounds == len(rounds) and sim_unserved == 1


async def test_the_coordinator_keeps_wait_counts_across_analyses_as_the_simulator_does(
    tmp_path: Path,
) -> None:
    """Three analyses nominating the :func:`budget_groups` at ``confirm_budget_rounds =
    9`` (:meth:`Screening.confirm_waiting`): the first serves a-b and c-d and leaves c-a
    waiting (its pair counted in ``Screening.waits``); the second starts c-a first (it
    waited, though its margin is the smallest) and leaves c-d, which shares c; the third
    serves c-d. The simulator's wait counts and started groups agree analysis by
    analysis; a fresh ``Screening`` state (a restart) starts from the margin order."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 2000)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        names = await _start(rc, budget=9, service_s=0.4)
        screening = rc.coord.screening
        back = {k: x for x, k in names.items()}
        live = []
        for _ in range(3):
            outcomes = await screening.confirm_waiting(
                PROFILE, budget_groups(names), EMPTY, analyse(EMPTY, 0.65, DetectorConfig())
            )
            started = sorted(sorted(back[k] for k in res.group.members)
                             for res in outcomes if res.run is not None or res.stopped)  # fmt: skip
            waits = {frozenset(back[k] for k in p): w
                     for p, w in screening.waits[PROFILE.name].items()}  # fmt: skip
            live.append((started, waits))
        screening.waits.clear()  # as after a restart: the margin order, c-d before c-a
        outcomes = await screening.confirm_waiting(
            PROFILE, budget_groups(names), EMPTY, analyse(EMPTY, 0.65, DetectorConfig())
        )
    restarted = [sorted(back[k] for k in res.group.members) for res in outcomes if res.run]
    assert restarted == [["c", "d"]]
    ac, cd = frozenset("ac"), frozenset("cd")
    assert live == [([["a", "b"], ["c", "d"]], {ac: 1}), ([["a", "c"]], {cd: 1}),
                    ([["c", "d"]], {ac: 1})]  # fmt: skip
    sim = run_budget_analyses(9, 3)
    assert [s for s, _ in live] == [sorted(sorted(g) for g in started) for started, _ in sim]
    assert [set(w) for _, w in live] == [w for _, w in sim]


def _rounds_plain(rc: RunningCoordinator) -> list[tuple[set[str], dict]]:  # type: ignore[type-arg]
    """Stored confirmation rounds without coins: (loaded set, context), oldest first."""
    stored = rc.coord.screening.flags.recent_rounds(PROFILE.name, ["confirmation"], 1000)
    return [({k for k, on in stored.schedules[r].items() if on}, stored.contexts[r])
            for r in stored.round_ids]  # fmt: skip
