"""Suspect groups of one analysis confirmed in batches of disjoint groups, live.

docs/confirmation-batches.md. :meth:`netcheck.coordinator.detection.Screening.analyse_and_confirm`
hands the suspect groups of an analysis to :func:`confirm_groups`; it packs them
(:func:`~netcheck.analysis.confirm_batch.pack_batches`) and confirms each batch with a
:class:`~netcheck.analysis.confirm_batch.ConfirmationBatch` (the pure planner the
simulator uses too): one :func:`~netcheck.coordinator.rounds.run_round` of kind
``confirmation`` per shared round, loading the union of the runs' load sets, with a
context listing each run's part (phase, tested set, loaded members). Each run stores its
flags or cleared record as a group confirmed alone would
(:func:`~netcheck.coordinator.group_flags.store_group_flags`). With
``confirm_batching = false`` every batch holds one group and keeps its planned order:
one group at a time, as before.

A member that is not connected when its group's batch starts: the group is not run (no
round, no record, no attempt spent). A member that leaves while its run is active: that
run stops before the next shared round, the others go on; if it had judged a look, its
cleared record is stored (the attempt counts: a node could otherwise leave to get its
group fresh looks at the same level), else nothing is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from netcheck.analysis.confirm import ConfirmationObservation
from netcheck.analysis.confirm_batch import ConfirmationBatch, batch_links, pack_batches
from netcheck.analysis.confirm_run import ConfirmationRun, prior_attempts
from netcheck.analysis.detectors import SuspectGroup
from netcheck.analysis.screening import Analysis, confirmation_observation
from netcheck.config import Profile
from netcheck.coordinator.rounds import run_round
from netcheck.errors import RoundError
from netcheck.logs import node_label
from netcheck.records import RoundKind, StoredRounds

if TYPE_CHECKING:
    from netcheck.coordinator.detection import Screening

log = logging.getLogger("netcheck.screening")

#: The outcome of a group whose every pair is already inside one confirmed flag.
ALREADY_FLAGGED = "already-flagged"


@dataclass
class GroupOutcome:
    """One suspect group's confirmation: its ``run`` (None: not run, ``reason``), the
    flag / record ids stored, and why a run stopped early (``stopped``)."""

    group: SuspectGroup
    run: ConfirmationRun | None = None
    ids: list[int] = field(default_factory=list)
    reason: str = ""
    stopped: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready entry of the analysis report's ``confirmations``."""
        members = list(self.group.members)
        if self.reason == ALREADY_FLAGGED:
            return {"group": members, "verdict": ALREADY_FLAGGED}
        if self.run is None:
            return {"group": members, "verdict": "not-run", "reason": self.reason}
        out: dict[str, Any] = {"group": members, "verdict": self.run.verdict,
                               "flags": [list(f) for f in self.run.flags],
                               "attempt": self.run.attempt, "flag_ids": self.ids}  # fmt: skip
        if self.stopped:
            out["stopped"] = self.stopped
        return out


async def confirm_groups(
    screening: Screening, profile: Profile, groups: Sequence[SuspectGroup], stored: StoredRounds,
    analysis: Analysis, *, batching: bool,
) -> list[GroupOutcome]:  # fmt: skip
    """Confirm ``groups`` (detector order) in batches of disjoint groups that no edge of
    ``analysis`` and no loose screening link (half the confirmation floor) joins
    (:func:`~netcheck.analysis.confirm_batch.batch_links`, module docstring);
    ``batching=False``: one group at a time in planned order. Groups whose every pair
    is already inside a confirmed flag (checked before packing, so that they take no
    place in a batch, and again when their batch starts) get ``already-flagged``
    outcomes (``reason``). Returns one outcome per group, in order.

    Raises:
        StorageError: a round or a flag could not be stored.
    """
    out: dict[int, GroupOutcome] = {}
    todo: list[int] = []
    for i, g in enumerate(groups):
        if await asyncio.to_thread(screening._already_flagged, profile.name, list(g.members)):
            out[i] = GroupOutcome(g, reason=ALREADY_FLAGGED)
        else:
            todo.append(i)
    members = [groups[i].members for i in todo]
    links = batch_links(members, [(e.a, e.b) for e in analysis.detection.edges],
                        analysis.matrix, screening.confirm.effect_floor / 2)  # fmt: skip
    packed = pack_batches(members, links) if batching else [[j] for j in range(len(todo))]
    newest = stored.round_ids[-1] if stored.round_ids else "none"
    for b, batch in enumerate(packed):
        idx = [todo[j] for j in batch]
        batch_id = f"{profile.name}/{newest}/{b}"
        picked = [groups[i] for i in idx]
        for i, res in zip(idx, await _confirm_batch(screening, profile, picked, stored, analysis,
                                                    batch_id, batching), strict=True):  # fmt: skip
            out[i] = res
    return [out[i] for i in range(len(groups))]


async def _confirm_batch(
    screening: Screening, profile: Profile, groups: Sequence[SuspectGroup], stored: StoredRounds,
    analysis: Analysis, batch_id: str, shuffle: bool,
) -> list[GroupOutcome]:  # fmt: skip
    outcomes = [GroupOutcome(g) for g in groups]
    connected = {s.node_key for s in screening.coord.connected(profile.name)}
    earlier = await asyncio.to_thread(screening._shared_flags, profile.name, None)
    schedules: dict[str, dict[str, bool]] = {}
    runs: list[ConfirmationRun] = []
    slots: list[int] = []
    for i, res in enumerate(outcomes):
        members = list(res.group.members)
        if await asyncio.to_thread(screening._already_flagged, profile.name, members):
            res.reason = ALREADY_FLAGGED
            continue
        gone = set(members) - connected
        if gone:  # its rounds would load the rest only: nothing to learn, an attempt spent
            res.reason = f"{len(gone)} member(s) not connected"
            continue
        prior = await asyncio.to_thread(
            screening._prior_observations, profile.name, members, analysis.deadline_s, schedules
        )
        runs.append(ConfirmationRun(
            tuple(members), screening.config.confirm_cycles, screening.config.confirm_max_cycles,
            screening.confirm, attempt=prior_attempts(members, earlier) + 1, prior=prior,
        ))  # fmt: skip
        slots.append(i)
    batch = ConfirmationBatch(runs, batch_id, screening.secret if shuffle else None)
    while batch.active:
        observations: list[ConfirmationObservation | None] = []
        for rnd in batch.plan():
            here = {s.node_key for s in screening.coord.connected(profile.name)}
            for slot in list(rnd.parts):
                left = set(runs[slot].members) - here
                if left and slot in batch.active:
                    batch.stop(slot, f"{len(left)} member(s) left")
            live = batch.live(rnd)
            if live is None:
                observations.append(None)
                continue
            try:
                report = await run_round(
                    screening.coord, profile.name, load=set(live.load),
                    kind=RoundKind.CONFIRMATION, rule="explicit", context=batch.context(live),
                )  # fmt: skip
            except RoundError as exc:  # no node connected at all
                for slot in batch.active:
                    batch.stop(slot, str(exc))
                observations.append(None)
                continue
            rows = await asyncio.to_thread(screening.flags.round_results, [report.round_id])
            schedules[report.round_id] = report.schedule
            observations.append(confirmation_observation(
                report.round_id, report.schedule, rows, analysis.deadline_s))  # fmt: skip
        batch.add(observations)
    for slot, (i, run) in enumerate(zip(slots, runs, strict=True)):
        res = outcomes[i]
        res.stopped = batch.stopped.get(slot, "")
        if run.group_result is None:  # stopped before its first look: nothing judged
            res.reason = res.stopped
            continue
        res.run = run
        res.ids = await asyncio.to_thread(
            screening._store_group_flags, profile, res.group, stored, analysis, run, schedules
        )
        log.warning("suspect group %s: %s %s (flags %s)%s",
                    [node_label(m) for m in run.members], run.verdict,
                    [[node_label(m, 12) for m in f] for f in run.flags], res.ids,
                    f", stopped: {res.stopped}" if res.stopped else "")  # fmt: skip
    return outcomes
