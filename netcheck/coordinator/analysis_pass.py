"""One analysis pass of a profile in the running coordinator: analysis, confirmation, slowness.

Steps 2 to 4 of :mod:`netcheck.coordinator.detection`'s overview, as plain functions of
the :class:`~netcheck.coordinator.detection.Screening` that holds the state
(:class:`PassHost`): :func:`analyse_and_confirm` analyses the stored screening window,
runs the persistent-slowness test (:func:`slowness`), confirms the suspect groups
(:func:`confirm_waiting`, :func:`confirm_group`; the loop is
:mod:`netcheck.coordinator.confirm_batches`) and then the alone stage
(:mod:`netcheck.coordinator.alone`). ``Screening``'s methods of the same names call
these; :func:`analyse_and_confirm` calls its steps back through the host
(``host._slowness``, ``host.confirm_waiting``), so replacing one on a ``Screening``
replaces it in the pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from functools import partial
from typing import Any, Protocol

from netcheck.analysis import evidence as ev
from netcheck.analysis.alone import AloneConfig
from netcheck.analysis.coins import COIN_RULE
from netcheck.analysis.confirm_budget import BUDGET_SPENT, next_waits
from netcheck.analysis.confirm_run import ConfirmationRun
from netcheck.analysis.detectors import DetectorConfig, SuspectGroup
from netcheck.analysis.screening import SCREEN_KINDS, Analysis, analyse
from netcheck.analysis.slowness import SlownessConfig, SlownessReport, persistent_slowness
from netcheck.config import Profile
from netcheck.coordinator import checks
from netcheck.coordinator.alone import confirm_alone, slow_nodes
from netcheck.coordinator.confirm_batches import (
    ALREADY_FLAGGED,
    ConfirmHost,
    GroupOutcome,
    confirm_groups,
    halted,
    not_judged,
    pool_short,
    set_aside,
    unserved,
)
from netcheck.coordinator.hooks import RoundHost
from netcheck.coordinator.jobs import ConfirmProgress
from netcheck.errors import RoundError
from netcheck.records import RoundKind, StoredRounds

log = logging.getLogger("netcheck.screening")


class PassHost(ConfirmHost, Protocol):
    """What a pass needs of :class:`~netcheck.coordinator.detection.Screening`: the
    confirmation loop's host, the detection settings, the per-profile counts kept in
    memory (``waits``: analyses each node pair's group waited unserved; ``looks``: the
    slowness test's last look), and the two steps :func:`analyse_and_confirm` calls
    back."""

    @property
    def detector(self) -> DetectorConfig: ...

    @property
    def slowness(self) -> SlownessConfig: ...

    @property
    def alone(self) -> AloneConfig: ...

    @property
    def waits(self) -> dict[str, dict[frozenset[str], int]]: ...

    @property
    def looks(self) -> dict[str, int]: ...

    async def _slowness(
        self, profile: Profile, stored: StoredRounds
    ) -> tuple[list[int], SlownessReport]: ...

    async def confirm_waiting(
        self, profile: Profile, groups: Sequence[SuspectGroup], stored: StoredRounds,
        analysis: Analysis, progress: ConfirmProgress | None = None,
        cancel: asyncio.Event | None = None,
    ) -> list[GroupOutcome]: ...  # fmt: skip


def known_profile(coord: RoundHost, name: str) -> Profile:
    """The coordinator's profile ``name``.

    Raises:
        RoundError: no such profile.
    """
    profile = coord.profiles.get(name)
    if profile is None:
        raise RoundError(f"unknown profile {name!r}")
    return profile


async def analyse_and_confirm(
    host: PassHost, profile_name: str, confirming: ConfirmProgress | None = None,
    cancel: asyncio.Event | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Analyse the stored window of ``profile_name``, confirm every suspect group
    (``confirming``: updated as it goes, for a job's progress).

    At a coordinator shutdown or once ``cancel`` (a job's) is set, the running
    confirmations stop "stopped, not judged" (no ``cleared`` record; their rounds
    count the attempt and are pooled into the next), the waiting groups and the
    alone stage are not started, a running alone stage stops before its next round
    and judges nothing more (no record; its rounds are pooled into the node's next
    attempt, :mod:`netcheck.coordinator.alone`), and the result carries
    ``"halted"`` (the cause, :func:`~netcheck.coordinator.confirm_batches.halted`).

    Returns ``{"profile", "analysis", "confirmations", "flag_ids"}`` (and
    ``"halted"`` when stopped so; ``"alone_pool_short"``: the slowness nominees
    whose alone rounds the canary pool could not cover, ``{"node", "reason",
    "unchecked_rounds"}`` each, :func:`~netcheck.coordinator.alone.confirm_alone`).

    Raises:
        RoundError: unknown profile.
    """
    confirming = confirming or ConfirmProgress()
    confirming.stage = "analysis"
    profile = known_profile(host.coord, profile_name)
    deadline_s = profile.deadline_s(0.0)
    kinds = (RoundKind.SCREENING,) if host.detector.drop_full_rounds else SCREEN_KINDS
    stored = await asyncio.to_thread(
        partial(host.flags.recent_rounds, kind_rules=[(RoundKind.CONFIRMATION, COIN_RULE)]),
        profile.name, kinds, host.config.screening_window_rounds,
    )  # fmt: skip
    flag_ids: list[int] = []
    confirmations: list[dict[str, Any]] = []
    if len(stored.round_ids) < 2:
        return {"profile": profile.name, "analysis": None, "confirmations": [],
                "flag_ids": []}  # fmt: skip
    analysis = await asyncio.to_thread(analyse, stored, deadline_s, host.detector)
    summary = ev.detection_summary(analysis)
    summary["load_probability"] = host.config.screening_load_probability
    screened = stored  # the slowness test reads screening rounds only (its docstring)
    if any(stored.kinds.get(r) == RoundKind.CONFIRMATION for r in stored.round_ids):
        screened = await asyncio.to_thread(
            host.flags.recent_rounds, profile.name, kinds, host.config.screening_window_rounds
        )
    slow_ids, slow_report = await host._slowness(profile, screened)
    flag_ids += slow_ids
    log.info(
        "screening analysis %s: %d nodes x %d rounds, %d edges, %d suspect groups",
        profile.name, summary["n_nodes"], summary["n_rounds"], len(summary["edges"]),
        len(summary["groups"]),
    )  # fmt: skip
    outcomes = await host.confirm_waiting(profile, analysis.detection.groups, stored,
                                          analysis, confirming, cancel)  # fmt: skip
    left = len(unserved(outcomes))
    for res in outcomes:
        if (
            res.run is None
            and not pool_short(res.reason)
            and not not_judged(res.reason)
            and res.reason not in (ALREADY_FLAGGED, BUDGET_SPENT)
        ):  # (a short pool or a stop is logged where it is found, naming the profile)
            log.warning("confirmation of %s not run: %s", res.group.members, res.reason)
        flag_ids.extend(res.ids)
    if left:
        log.info("screening analysis %s: %d suspect groups left for the next analysis (%s, "
                 "confirm_budget_rounds = %d)", profile.name, left, BUDGET_SPENT,
                 host.config.confirm_budget_rounds)  # fmt: skip
    confirmations = [res.as_dict() for res in outcomes]
    dry: list[dict[str, Any]] = []  # nominees the canary pool left unjudged alone
    if not halted(host, cancel):
        skip = await asyncio.to_thread(slow_nodes, host.flags, profile.name)
        flag_ids += await confirm_alone(host.coord, host.flags, profile, slow_report,
                                        host.alone, skip, screened.results, confirming,
                                        partial(halted, host, cancel), dry)  # fmt: skip
    out = {"profile": profile.name, "analysis": summary, "confirmations": confirmations,
           "flag_ids": flag_ids}  # fmt: skip
    if dry:
        out["alone_pool_short"] = dry
    if cause := halted(host, cancel):  # in the groups' stage or the alone stage
        log.warning("screening analysis %s: confirmation stopped, not judged: %s",
                    profile.name, cause)  # fmt: skip
        out["halted"] = cause
    return out


async def confirm_waiting(
    host: PassHost, profile: Profile, groups: Sequence[SuspectGroup], stored: StoredRounds,
    analysis: Analysis, progress: ConfirmProgress | None = None,
    cancel: asyncio.Event | None = None,
) -> list[GroupOutcome]:  # fmt: skip
    """One analysis's :func:`confirm_groups`, longest-waiting first by the profile's
    wait counts (``host.waits``), which it then advances
    (:func:`~netcheck.analysis.confirm_budget.next_waits`: the pairs of the groups
    the budget left unserved count one more analysis, those of the groups set aside
    for a short canary pool or a halt keep their count
    (:func:`~netcheck.coordinator.confirm_batches.set_aside`), the rest drop). The counts
    are kept in memory only: a restart resets the order to the margin order (no
    evidence or attempt is lost; those are stored)."""
    outcomes = await confirm_groups(host, profile, groups, stored, analysis,
                                    batching=host.config.confirm_batching,
                                    progress=progress, cancel=cancel,
                                    waits=host.waits.get(profile.name))  # fmt: skip
    host.waits[profile.name] = next_waits([g.members for g in groups], unserved(outcomes),
                                          host.waits.get(profile.name, {}),
                                          set_aside(outcomes))  # fmt: skip
    return outcomes


async def slowness(
    host: PassHost, profile: Profile, stored: StoredRounds
) -> tuple[list[int], SlownessReport]:
    """The persistent-slowness test over ``stored`` as the next look: the larger of
    this process's analyses of the profile (``host.looks``) and the stored screening
    and full rounds / ``screening_analyze_every`` (survives a restart); returns flag ids
    (none unless ``direct_flags``) and the report (its rejections and nominees are
    confirmed alone after the contention confirmations). Each round is judged at
    the load probability its stored schedule rule carries
    (:func:`~netcheck.coordinator.checks.stored_load_probabilities`; others at the
    configured one), each node at the largest null rate and nomination floor over
    its rounds: a window that still holds rounds of a larger ``q`` than the
    configured one is not judged at the smaller null."""
    count = await asyncio.to_thread(host.flags.count_rounds, profile.name, SCREEN_KINDS)
    look = max(host.looks.get(profile.name, 0) + 1,
               -(-count // host.config.screening_analyze_every))  # fmt: skip
    host.looks[profile.name] = look
    round_q = await asyncio.to_thread(checks.stored_load_probabilities, host.flags,
                                      stored.round_ids)  # fmt: skip
    report = persistent_slowness(stored, profile.reference_t_s, look, host.slowness,
                                 host.config.screening_load_probability, round_q)  # fmt: skip
    ids = await asyncio.to_thread(checks.slowness, host.flags, profile, stored, report)
    return ids, report


async def confirm_group(
    host: PassHost, profile: Profile, group: SuspectGroup, stored: StoredRounds,
    analysis: Analysis,
) -> tuple[ConfirmationRun, list[int]]:  # fmt: skip
    """Confirmation rounds for one suspect group alone (:func:`confirm_groups` with
    one group, in planned order); stores one ``shared-backend`` flag per confirmed
    clique, or one ``cleared`` record; returns the run and the flag ids.

    Raises:
        RoundError: a member is not connected, or its first look does not fit in
            ``confirm_budget_rounds`` (nothing is run or stored), or the run
            stopped before its first look (nothing stored).
    """
    (res,) = await confirm_groups(host, profile, [group], stored, analysis, batching=False)
    if res.run is None:
        raise RoundError(res.reason or "not run")
    return res.run, res.ids
