"""Suspect groups of one analysis confirmed in shared rounds, live.

docs/confirmation-batches.md. :meth:`netcheck.coordinator.detection.Screening.analyse_and_confirm`
hands the suspect groups of an analysis to :func:`confirm_groups`. It drives one
:class:`~netcheck.analysis.confirm_batch.ConfirmationBatch` (the pure planner the
simulator uses too): at each step boundary the waiting groups that share no node and no
link with the running ones start (:func:`~netcheck.analysis.confirm_batch.admit`); one
:func:`~netcheck.coordinator.rounds.run_round` of kind ``confirmation`` per shared round
loads the union of the runs' load sets, with a context listing each run's part (phase,
tested set, loaded members). Each run stores its flags or cleared record as soon as it
finishes, as a group confirmed alone would
(:func:`~netcheck.coordinator.group_flags.store_group_flags`). With
``confirm_batching = false`` one group runs at a time, in planned order, as before.
With ``confirm_coins`` every connected node outside the active runs also gets the
screening schedule's coin in each such round (stored rule
:data:`~netcheck.analysis.coins.COIN_RULE`, context entry ``coins``), and screening
reads those nodes' cells (docs/screening-in-confirmation.md).

A member that is not connected when its group would start: the group is not run (no
round, no record, no attempt spent). A member that leaves while its run is active: that
run stops before the next shared round, the others go on; if it had judged a look, it is
closed there like a run the budget stops (the pairs its split phase confirmed at that
look are its flags, else a cleared record; the attempt counts: a node could otherwise
leave to get its group fresh looks at the same level, or to turn a confirmed pair into
a cleared record), else nothing is stored; its stored rounds still count the attempt
(:func:`~netcheck.coordinator.group_flags.started_runs`).

With ``confirm_budget_rounds`` (:mod:`netcheck.analysis.confirm_budget`) the groups wait
longest-waiting first (the analyses their pairs were left unserved in a row, counted by
the caller in memory, :func:`~netcheck.analysis.confirm_budget.next_waits` over
:func:`unserved`), then strongest first, a group starts only when its first block fits in what is left of the
budget (else it is not run: reason ``confirmation budget spent``, no round, no record,
no attempt), and a running group whose next block does not fit is stopped like a run
whose member left (it has judged its first look: a cleared record, the attempt counts).

The canary pool (docs/detection.md "Confirmation", point 10): a member that gets no
canary gets no job and no timing (``unchecked``), so a group whose first block the
pool cannot cover is not started (reason :data:`POOL_SHORT`: no round, no record, no
attempt), a running run whose next block it cannot cover is stopped before the block,
and one in which a member still comes back ``unchecked`` (the coins and the alone stage
draw from the same pool) is stopped at that round. Such a run stores no ``cleared``
record (pairs confirmed at a judged look are still flagged); its rounds with jobs
count the attempt as an interrupted run's do and are pooled into the next; a WARNING
names the profile and the build command.

A coordinator shutdown (``coord.stopping``) or a job cancel (the ``cancel`` event) stops
every active run the same way, "stopped, not judged" (:func:`halted`): the round in
flight, which shutdown aborts, and every later one is not judged, no ``cleared``
record is stored (pairs confirmed at an earlier look stay flagged), the rounds run
count the attempt and are pooled into the next; the groups still waiting are not
started (no round, no record, no attempt).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from netcheck.analysis.confirm import ConfirmationObservation, ConfirmConfig, plan_confirmation
from netcheck.analysis.confirm_batch import ConfirmationBatch, admit, batch_links
from netcheck.analysis.confirm_budget import (
    BUDGET_SPENT,
    PairWaits,
    confirmation_order,
    first_block_rounds,
    fits,
)
from netcheck.analysis.confirm_run import ConfirmationRun, next_attempt
from netcheck.analysis.detectors import SuspectGroup
from netcheck.analysis.screening import Analysis, confirmation_observation
from netcheck.config import CoordinatorConfig, Profile
from netcheck.coordinator.group_flags import started_runs
from netcheck.coordinator.hooks import RoundHost
from netcheck.coordinator.jobs import ConfirmProgress
from netcheck.coordinator.pool import pool_shortfall
from netcheck.coordinator.rounds import run_round
from netcheck.errors import RoundError
from netcheck.logs import node_label
from netcheck.records import FlagStatus, RoundKind, StoredRounds, Verdict
from netcheck.storage.flags import FlagStore


class ConfirmHost(Protocol):
    """What the loop needs of :class:`netcheck.coordinator.detection.Screening` (a
    protocol, so this module does not import it back)."""

    @property
    def coord(self) -> RoundHost: ...

    @property
    def config(self) -> CoordinatorConfig: ...

    @property
    def confirm(self) -> ConfirmConfig: ...

    @property
    def secret(self) -> bytes: ...

    @property
    def flags(self) -> FlagStore: ...

    def _shared_flags(self, profile: str, status: FlagStatus | None) -> list[list[str]]: ...

    def _already_flagged(self, profile: str, members: Sequence[str]) -> bool: ...

    def _prior_observations(
        self, profile: str, members: Sequence[str], deadline_s: float,
        schedules: dict[str, dict[str, bool]],
    ) -> tuple[ConfirmationObservation, ...]: ...  # fmt: skip

    def _store_group_flags(
        self, profile: Profile, group: SuspectGroup, stored: StoredRounds, analysis: Analysis,
        run: ConfirmationRun, schedules: Mapping[str, dict[str, bool]], *,
        cleared_record: bool = True,
    ) -> list[int]: ...  # fmt: skip


log = logging.getLogger("netcheck.screening")

#: The outcome of a group whose every pair is already inside one confirmed flag.
ALREADY_FLAGGED = "already-flagged"

#: The start of ``GroupOutcome.reason`` / a stop reason when the canary pool cannot
#: cover a run's rounds (docs/detection.md "Confirmation", "Canaries run out").
POOL_SHORT = "reference pool too small"


def pool_short(reason: str) -> bool:
    """Whether a not-run reason or stop reason is :data:`POOL_SHORT`'s."""
    return reason.startswith(POOL_SHORT)


#: What a :data:`POOL_SHORT` stop did, by where it was found.
_NOT_STARTED = "not started: no round, no record, no attempt spent"
_STOPPED = ("stopped, not judged: no cleared record; its rounds with jobs count the attempt "
            "and are pooled into the next")  # fmt: skip


#: The causes :func:`halted` names.
SHUTDOWN = "coordinator shutdown"
CANCELLED = "screening job cancelled"


def halted(screening: ConfirmHost, cancel: asyncio.Event | None = None) -> str:
    """Why confirmation must stop now without judging: :data:`SHUTDOWN` once the
    coordinator is stopping (its sessions are closing: a round in flight ends
    ``aborted``), :data:`CANCELLED` once ``cancel`` is set; "" otherwise."""
    if screening.coord.stopping:
        return SHUTDOWN
    if cancel is not None and cancel.is_set():
        return CANCELLED
    return ""


def not_judged(reason: str) -> bool:
    """Whether a run's stop reason leaves it "stopped, not judged" (no ``cleared``
    record): the canary pool's or :func:`halted`'s."""
    return _STOPPED in reason


def pool_reason(profile: str, detail: str, what: str) -> str:
    """A :data:`POOL_SHORT` reason: the profile, ``detail`` (which rounds, which
    fingerprints), ``what`` was done about it, and the command that builds more."""
    return (f"{POOL_SHORT} for profile {profile} ({detail}); {what}; build more references "
            f"with `netcheck reference build --profile {profile}`")  # fmt: skip


@dataclass
class GroupOutcome:
    """One suspect group's confirmation: its ``run`` (None: not run, ``reason``), the
    flag / record ids stored, and why a run stopped early (``stopped``)."""

    group: SuspectGroup
    run: ConfirmationRun | None = None
    ids: list[int] = field(default_factory=list)
    reason: str = ""
    stopped: str = ""
    unchecked_rounds: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready entry of the analysis report's ``confirmations``."""
        members = list(self.group.members)
        if self.reason == ALREADY_FLAGGED:
            return {"group": members, "verdict": ALREADY_FLAGGED}
        if self.run is None:
            out0: dict[str, Any] = {"group": members, "verdict": "not-run", "reason": self.reason}
            if pool_short(self.reason):
                out0["pool_short"] = True
                out0["unchecked_rounds"] = self.unchecked_rounds
            return out0
        out: dict[str, Any] = {"group": members, "verdict": self.run.verdict,
                               "flags": [list(f) for f in self.run.flags],
                               "attempt": self.run.attempt, "flag_ids": self.ids}  # fmt: skip
        if self.stopped:
            out["stopped"] = self.stopped
        if pool_short(self.stopped):
            out["pool_short"] = True
            out["unchecked_rounds"] = self.unchecked_rounds
        return out


def unserved(outcomes: Sequence[GroupOutcome]) -> list[int]:
    """Indices of the ``outcomes`` (one per group, in order) that the budget left
    unserved: not run, reason ``confirmation budget spent``, never started."""
    return [i for i, res in enumerate(outcomes)
            if res.run is None and res.reason == BUDGET_SPENT and not res.stopped]  # fmt: skip


def set_aside(outcomes: Sequence[GroupOutcome]) -> list[int]:
    """Indices of the ``outcomes`` (one per group, in order) not judged for a cause
    that is neither the group's nor the budget's: not started or stopped unjudged
    because the canary pool could not cover them (:data:`POOL_SHORT`) or by a shutdown
    or a cancel (:func:`halted`). Their pairs keep their place in the budget's waiting
    order (:func:`~netcheck.analysis.confirm_budget.next_waits`, ``kept``)."""
    return [i for i, res in enumerate(outcomes)
            if res.run is None and (_NOT_STARTED in res.reason or not_judged(res.reason))]  # fmt: skip


async def confirm_groups(
    screening: ConfirmHost, profile: Profile, groups: Sequence[SuspectGroup], stored: StoredRounds,
    analysis: Analysis, *, batching: bool, progress: ConfirmProgress | None = None,
    waits: PairWaits | None = None, cancel: asyncio.Event | None = None,
) -> list[GroupOutcome]:  # fmt: skip
    """Confirm ``groups`` in shared rounds (module docstring): they wait longest-waiting
    first by ``waits`` (the pairs' counts of analyses left unserved; None: nothing
    waited), then strongest first
    (:func:`~netcheck.analysis.confirm_budget.confirmation_order`, ties in detector
    order); at each step boundary the waiting groups that share no node and no link (a
    detector edge of ``analysis`` or a loose screening link,
    :func:`~netcheck.analysis.confirm_batch.batch_links`) with the running ones start
    (:func:`~netcheck.analysis.confirm_batch.admit`); ``batching=False``: one group at a
    time in that order. A waiting group whose every pair is already inside a
    confirmed flag gets an ``already-flagged`` outcome, one with a member not connected
    a ``not-run`` outcome (``reason``), one whose first block no longer fits in the
    analysis's ``confirm_budget_rounds`` a ``not-run`` outcome with reason
    ``confirmation budget spent``; a run that finishes stores its flags or record
    at once. ``progress`` (a job's) counts the rounds run and the groups under test
    and settled as it goes. At a coordinator shutdown or once ``cancel`` is set
    (:func:`halted`) the active runs stop "stopped, not judged" (no ``cleared``
    record) and the waiting groups get a ``not-run`` outcome naming the cause.
    Returns one outcome per group, in order.

    Raises:
        StorageError: a round or a flag could not be stored.
    """
    outcomes = [GroupOutcome(g) for g in groups]
    links = batch_links([g.members for g in groups], [(e.a, e.b) for e in analysis.detection.edges],
                        analysis.matrix, screening.confirm.effect_floor / 2)  # fmt: skip
    newest = stored.round_ids[-1] if stored.round_ids else "none"
    config = screening.config
    batch = ConfirmationBatch([], f"{profile.name}/{newest}", screening.secret if batching else None,
                              screening.secret if config.confirm_coins else None,
                              links, budget=config.confirm_budget_rounds)  # fmt: skip
    pending = confirmation_order(groups, waits)
    group_of: dict[int, int] = {}  # batch slot -> group index
    finished: set[int] = set()
    schedules: dict[str, dict[str, bool]] = {}
    progress = progress or ConfirmProgress()
    progress.stage, progress.groups_total = "groups", len(groups)
    unchecked: dict[int, int] = {}  # batch slot -> rounds in which a member got no job
    while True:
        if cause := halted(screening, cancel):
            for i in pending:
                outcomes[i].reason = f"{cause}; {_NOT_STARTED}"
            pending = []
        pending = await _runnable(screening, profile, outcomes, pending)
        for i in pending:  # the budget only shrinks: a group that does not fit now never will
            if not fits(first_block_rounds(len(groups[i].members), config.confirm_cycles),
                        batch.remaining):  # fmt: skip
                outcomes[i].reason = BUDGET_SPENT
        pending = [i for i in pending if outcomes[i].reason != BUDGET_SPENT]
        pending = await _covered(screening, profile, outcomes, pending)
        busy = {k for slot in batch.active for k in batch.runs[slot].members}
        if batching:
            picks = [pending[j] for j in admit([groups[i].members for i in pending], busy, links)]
        else:
            picks = [] if busy or not pending else pending[:1]
        if picks:
            earlier = await asyncio.to_thread(screening._shared_flags, profile.name, None)
            started = await asyncio.to_thread(started_runs, screening.flags, profile.name,
                                              {k for i in picks for k in groups[i].members})  # fmt: skip
        for i in picks:
            members = list(groups[i].members)
            prior = await asyncio.to_thread(
                screening._prior_observations, profile.name, members, analysis.deadline_s,
                schedules,
            )  # fmt: skip
            group_of[batch.add_run(ConfirmationRun(
                tuple(members), screening.config.confirm_cycles,
                screening.config.confirm_max_cycles, screening.confirm,
                attempt=next_attempt(members, earlier, started), prior=prior,
            ))] = i  # fmt: skip
        pending = [i for i in pending if i not in picks]
        progress.groups_active = len(batch.active)
        progress.groups_done = len(groups) - len(pending) - len(batch.active)
        if not batch.active:
            return outcomes
        await _stop_uncovered(screening, profile, batch)
        batch.add(await _step(screening, profile, batch, analysis, schedules, progress, unchecked,
                              cancel))  # fmt: skip
        for slot, run in enumerate(batch.runs):
            if slot not in finished and (run.done or slot in batch.stopped):
                finished.add(slot)
                outcomes[group_of[slot]].unchecked_rounds = unchecked.get(slot, 0)
                await _finish(screening, profile, outcomes[group_of[slot]], batch, slot, stored,
                              analysis, schedules)  # fmt: skip


async def _runnable(
    screening: ConfirmHost, profile: Profile, outcomes: list[GroupOutcome], pending: list[int]
) -> list[int]:
    """``pending`` without the groups already flagged or with a member not connected
    (their outcomes get the reason)."""
    connected = {s.node_key for s in screening.coord.connected(profile.name)}
    keep = []
    for i in pending:
        res = outcomes[i]
        members = list(res.group.members)
        if await asyncio.to_thread(screening._already_flagged, profile.name, members):
            res.reason = ALREADY_FLAGGED
        elif gone := set(members) - connected:
            # its rounds would load the rest only: nothing to learn, an attempt spent
            res.reason = f"{len(gone)} member(s) not connected"
        else:
            keep.append(i)
    return keep


def _fingerprints(screening: ConfirmHost, profile: Profile) -> dict[str, str]:
    return {s.node_key: s.fingerprint_id for s in screening.coord.connected(profile.name)}


def _loads(block: Sequence[Collection[str]]) -> Counter[str]:
    """Node key -> rounds of ``block`` (load sets) that load it."""
    return Counter(k for load in block for k in load)


async def _covered(
    screening: ConfirmHost, profile: Profile, outcomes: list[GroupOutcome], pending: list[int]
) -> list[int]:
    """``pending`` without the groups whose first block the canary pool cannot cover
    (:func:`~netcheck.coordinator.pool.pool_shortfall`): their outcome gets a
    :data:`POOL_SHORT` reason (not run: no round, no record, no attempt) and a warning
    is logged. Each group is checked against the whole pool (the runs already going
    draw from it too: :func:`_step` stops a run whose member gets no canary)."""
    if not pending:
        return pending
    fps = _fingerprints(screening, profile)
    cycles = screening.config.confirm_cycles
    keep = []
    for i in pending:
        res = outcomes[i]
        block = plan_confirmation(list(res.group.members), cycles)
        short = await asyncio.to_thread(pool_shortfall, screening.coord.store, profile,
                                        _loads(block), fps)  # fmt: skip
        if short:
            res.reason = pool_reason(profile.name, f"first block of {len(block)} rounds; "
                                      + "; ".join(short), _NOT_STARTED)  # fmt: skip
            log.warning("profile %s: confirmation of suspect group %s: %s",
                        profile.name, [node_label(m) for m in res.group.members],
                        res.reason)  # fmt: skip
        else:
            keep.append(i)
    return keep


async def _stop_uncovered(
    screening: ConfirmHost, profile: Profile, batch: ConfirmationBatch
) -> None:
    """Stop (reason :data:`POOL_SHORT`) every active run whose next block the canary
    pool cannot cover, the runs' needs added up in slot order (an earlier run's block
    is served first): its members would get no job, so no timing, in the rounds the
    pool does not cover."""
    fps = _fingerprints(screening, profile)
    wanted: Counter[str] = Counter()
    for slot in batch.active:
        block = batch.runs[slot].next_block()
        wanted += _loads(block)
        short = await asyncio.to_thread(pool_shortfall, screening.coord.store, profile,
                                        wanted, fps)  # fmt: skip
        if short:
            wanted -= _loads(block)
            batch.stop(slot, pool_reason(profile.name, f"next block of {len(block)} rounds; "
                                          + "; ".join(short), _STOPPED))  # fmt: skip


async def _step(
    screening: ConfirmHost, profile: Profile, batch: ConfirmationBatch, analysis: Analysis,
    schedules: dict[str, dict[str, bool]], progress: ConfirmProgress,
    unchecked: dict[int, int] | None = None, cancel: asyncio.Event | None = None,
) -> list[ConfirmationObservation | None]:  # fmt: skip
    """Run the shared rounds of the batch's next step (each counted in ``progress``); a
    run whose member left stops before the next round (the others go on). A run whose
    member got no job for lack of canaries (verdict ``unchecked``) in a round is
    stopped there (reason :data:`POOL_SHORT`; that round counted in ``unchecked``,
    slot -> rounds): that round is not judged, nor any later one. So is every run at a
    coordinator shutdown or a cancel (:func:`halted`), checked before each round and
    after it (the round in flight at shutdown ends ``aborted``)."""
    observations: list[ConfirmationObservation | None] = []

    def halt() -> bool:
        if cause := halted(screening, cancel):
            for slot in batch.active:
                batch.stop(slot, f"{cause}; {_STOPPED}")
        return bool(cause)

    for rnd in batch.plan():
        if halt():
            observations.append(None)
            continue
        here = {s.node_key for s in screening.coord.connected(profile.name)}
        for slot in list(rnd.parts):
            left = set(batch.runs[slot].members) - here
            if left and slot in batch.active:
                batch.stop(slot, f"{len(left)} member(s) left")
        live = batch.live(rnd)
        if live is None:
            observations.append(None)
            continue
        try:
            report = await run_round(
                screening.coord, profile.name, load=batch.load(live),
                kind=RoundKind.CONFIRMATION, rule=batch.rule, context=batch.context(live),
            )  # fmt: skip
        except RoundError as exc:  # no node connected at all
            halt()  # (first: at shutdown the sessions are gone)
            for slot in batch.active:
                batch.stop(slot, str(exc))
            observations.append(None)
            continue
        progress.rounds_done += 1
        if halt():  # the round in flight at shutdown: aborted, or cut by the cancel
            observations.append(None)
            continue
        dry = {o.node_key for o in report.outcomes if o.verdict == Verdict.UNCHECKED}
        for slot, part in live.parts.items():
            if part & dry:
                if unchecked is not None:
                    unchecked[slot] = unchecked.get(slot, 0) + 1
                batch.stop(slot, pool_reason(profile.name, f"round {report.round_id}: "
                                              f"{len(part & dry)} member(s) unchecked, no canary",
                                              _STOPPED))  # fmt: skip
        rows = await asyncio.to_thread(screening.flags.round_results, [report.round_id])
        schedules[report.round_id] = report.schedule
        observations.append(confirmation_observation(
            report.round_id, report.schedule, rows, analysis.deadline_s))  # fmt: skip
    return observations


async def _finish(
    screening: ConfirmHost, profile: Profile, res: GroupOutcome, batch: ConfirmationBatch,
    slot: int, stored: StoredRounds, analysis: Analysis, schedules: dict[str, dict[str, bool]],
) -> None:  # fmt: skip
    """Store a finished or stopped run's flags or cleared record (none if it stopped
    before its first look: nothing was judged; no cleared record if it stopped "not
    judged", :func:`not_judged`)."""
    run = batch.runs[slot]
    res.stopped = batch.stopped.get(slot, "")
    dry = not_judged(res.stopped)
    if dry:
        log.warning("profile %s: confirmation of suspect group %s: %s",
                    profile.name, [node_label(m) for m in run.members], res.stopped)  # fmt: skip
    if run.group_result is None or (dry and not run.flags):
        # nothing judged, or the canaries ran out, or shutdown/cancel: no cleared record
        # (the rounds it ran with jobs are pooled into the next attempt, and count it as
        # for a run interrupted by a restart, group_flags.started_runs)
        res.reason = res.stopped
        return
    res.run = run
    res.ids = await asyncio.to_thread(
        screening._store_group_flags, profile, res.group, stored, analysis, run, schedules,
        cleared_record=not dry,
    )  # fmt: skip
    log.warning("suspect group %s: %s %s (flags %s)%s",
                [node_label(m) for m in run.members], run.verdict,
                [[node_label(m, 12) for m in f] for f in run.flags], res.ids,
                f", stopped: {res.stopped}" if res.stopped else "")  # fmt: skip
