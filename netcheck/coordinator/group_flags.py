"""Suspect-group confirmation's storage side in the running coordinator (sync; called
from :class:`netcheck.coordinator.detection.Screening` in a worker thread): the earlier
flags and started runs of a profile (attempt counts), the pooled confirmation rounds
read back, and the ``shared-backend`` / ``declared-host`` flags or ``cleared`` record a
run leaves (docs/detection.md "Confirmation")."""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from netcheck.analysis import evidence as ev
from netcheck.analysis import rules
from netcheck.analysis.confirm import CLEARED, SHARED_BACKEND, ConfirmationObservation
from netcheck.analysis.confirm_batch import context_parts, restrict
from netcheck.analysis.confirm_run import ConfirmationRun, stored_runs
from netcheck.analysis.detectors import DetectorConfig, SuspectGroup
from netcheck.analysis.screening import Analysis, confirmation_observation
from netcheck.config import CoordinatorConfig, Profile
from netcheck.records import FlagKind, FlagStatus, RoundKind, StoredRounds
from netcheck.storage.flag_merge import raise_flag
from netcheck.storage.flags import FlagStore


def declared_host(members: Sequence[str], node_hosts: Mapping[str, str]) -> str | None:
    """The host every one of ``members`` is declared on (``node_hosts``), or None when
    one is undeclared or they are declared on different hosts."""
    hosts = {node_hosts.get(m) for m in members}
    return hosts.pop() if len(hosts) == 1 and None not in hosts else None


def shared_flags(flags: FlagStore, profile: str, status: FlagStatus | None) -> list[list[str]]:
    """Node sets of the ``shared-backend`` and ``declared-host`` flags of ``profile``."""
    return [
        list(f.node_keys)
        for kind in (SHARED_BACKEND, str(FlagKind.DECLARED_HOST))
        for f in flags.list_flags(kind=kind, status=status, profile=profile, limit=None)
    ]


def already_flagged(flags: FlagStore, profile: str, members: Sequence[str]) -> bool:
    """Every pair of ``members`` is already inside one confirmed ``shared-backend`` or
    ``declared-host`` flag of ``profile``."""
    flagged = [set(f) for f in shared_flags(flags, profile, FlagStatus.CONFIRMED)]
    return all(
        any({a, b} <= f for f in flagged)
        for a, b in itertools.combinations(sorted(set(members)), 2)
    )


def started_runs(flags: FlagStore, profile: str, members: Collection[str]) -> list[tuple[str, ...]]:
    """The groups of the confirmation runs of ``profile`` that stored a round in which
    one of ``members`` has a result row, one per run
    (:func:`~netcheck.analysis.confirm_run.stored_runs`), finished or not: attempts are
    counted on them too (:func:`~netcheck.analysis.confirm_run.next_attempt`). Every
    earlier run that judged a look of a group sharing 2+ of ``members`` is among them:
    its first block's group rounds loaded all its members."""
    contexts = flags.round_contexts(profile, [str(RoundKind.CONFIRMATION)], node_keys=members)
    return stored_runs(contexts)


def prior_observations(
    flags: FlagStore, config: CoordinatorConfig, profile: str, members: Sequence[str], deadline_s: float,
    schedules: dict[str, dict[str, bool]],
) -> tuple[ConfirmationObservation, ...]:  # fmt: skip
    """Earlier confirmation rounds of ``profile`` in which a run loaded only members of
    the group (among the ``confirm_pool_rounds`` most recent that loaded any member), as
    observations restricted to that run's loaded nodes
    (:func:`~netcheck.analysis.confirm_batch.restrict`) and stamped with the phase and
    tested set its context recorded, oldest first (:class:`ConfirmationRun` keeps the
    balanced strata). A shared round (:func:`~netcheck.analysis.confirm_batch.round_context`)
    gives one observation per run part within the group; an older single-run round
    counts when its whole load set lies within the group. Their schedules are added to
    ``schedules`` (for the evidence). Rounds without a recorded phase and tested set
    (the alone stage's, older ones) are left out."""
    if config.confirm_pool_rounds <= 0:
        return ()
    want = frozenset(members)
    stored = flags.recent_rounds(
        profile, [str(RoundKind.CONFIRMATION)], config.confirm_pool_rounds,
        node_keys=want,
    )  # fmt: skip
    out: list[ConfirmationObservation] = []
    for rid in stored.round_ids:
        schedule = stored.schedules[rid]
        loaded = frozenset(k for k, on in schedule.items() if on)
        parts = [p for p in context_parts(stored.contexts.get(rid, {}), loaded)
                 if p.loaded and p.loaded <= want]  # fmt: skip
        if not parts:
            continue
        schedules[rid] = schedule
        obs = confirmation_observation(rid, schedule, stored.results, deadline_s)
        out.extend(replace(restrict(obs, p.loaded), phase=p.phase, tested=p.tested)
                   for p in parts)  # fmt: skip
    return tuple(out)


def store_group_flags(
    flags: FlagStore, config: CoordinatorConfig, detector: DetectorConfig, profile: Profile, group: SuspectGroup, stored: StoredRounds, analysis: Analysis,
    run: ConfirmationRun, schedules: Mapping[str, dict[str, bool]], *,
    cleared_record: bool = True,
) -> list[int]:  # fmt: skip
    """Store a finished (or closed) run's flags (``shared-backend``, or
    ``declared-host`` for members declared on one host) and, unless ``cleared_record``
    is false (a run the canary pool cut short), the ``cleared`` record of the pairs it
    did not confirm; returns their ids.

    Raises:
        StorageError: a flag could not be stored.
    """
    conf_rows = flags.round_results([o.round_id for o in run.judged])
    evidence = ev.shared_backend_evidence(
        group, stored, analysis, detector, run, schedules, conf_rows
    )
    group_res = run.group_result
    assert group_res is not None
    ids = []
    declared = {m: config.node_hosts[m] for m in group.members
                if m in config.node_hosts}  # fmt: skip
    for flag in run.flags:
        stat, level = ev.flag_statistic(run, flag)
        host = declared_host(flag, config.node_hosts)
        doc = {**evidence, "confirmed_members": list(flag), "declared_hosts": declared}
        if host is not None:  # the operator said these share a machine: not a farm
            kind = str(FlagKind.DECLARED_HOST)
            doc.update(declared_host=host, rule=rules.declared_host(
                group_res.effect_floor, host))  # fmt: skip
        else:
            kind = SHARED_BACKEND
        fid, _new = raise_flag(flags, kind, FlagStatus.CONFIRMED, profile.name,
                               flag, stat, level, doc)  # fmt: skip
        ids.append(fid)
    cleared = [(a, b) for a, b in itertools.combinations(sorted(set(group.members)), 2)
               if not any({a, b} <= set(f) for f in run.flags)]  # fmt: skip
    if cleared and cleared_record:  # none for a run the canary pool cut short
        # The record of the test: it also counts this group's attempts
        # (prior_attempts), also when flags name only some of its members or merge
        # into an open flag, so a re-nominated group never gets a fresh level.
        p_min = min((t.p for t in group_res.members if math.isfinite(t.p)), default=math.nan)
        doc = {**evidence, "confirmed_members": list(group_res.confirmed_members),
               "cleared_pairs": [list(p) for p in cleared]}  # fmt: skip
        ids.append(flags.add_flag(SHARED_BACKEND, CLEARED, profile.name,
                                       list(group.members), p_min, group_res.p_threshold,
                                       doc))  # fmt: skip
    return ids
