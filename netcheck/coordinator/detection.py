"""Detection in the running coordinator: screening rounds, analysis, confirmation, flags.

docs/detection.md describes the method; the statistics are the pure functions of
:mod:`netcheck.analysis` (:mod:`~netcheck.analysis.screening` for the analysis,
:mod:`~netcheck.analysis.evidence` for the flags' evidence documents). This module wires
them to live rounds and to storage, with :mod:`~netcheck.coordinator.screening_timer`
(the background timer) and :mod:`~netcheck.coordinator.analysis_pass` (steps 2 to 4):

1. **Screening rounds** (:meth:`Screening.screening_round`): each node connected with
   the profile is loaded with probability ``screening_load_probability`` (1/2) from
   the secret schedule
   (:func:`netcheck.analysis.schedule.screening_plan`, keyed by the coordinator's
   ``schedule_secret_file`` and the round id); every ``screening_full_every``-th round
   loads every node (a full-load capacity round). A background timer can run them
   (``screening_interval_s``).
2. **Analysis** (:func:`~netcheck.analysis.screening.analyse`) of the stored raw rows of
   the most recent ``screening_window_rounds`` screening rounds (and full rounds unless
   the detector drops them) and confirmation rounds with screening coins
   (``confirm_coins``, :mod:`netcheck.analysis.coins`) -> suspect groups.
3. **Confirmation** (:func:`~netcheck.coordinator.confirm_batches.confirm_groups`):
   rounds loading only the group interleaved with rounds loading each member alone
   (:func:`plan_confirmation`), judged by :func:`judge_confirmation` after every
   ``confirm_cycles`` cycles until confirmed or ``confirm_max_cycles``; disjoint groups
   of one analysis share rounds (``confirm_batching``, docs/confirmation-batches.md),
   longest-waiting then strongest nominations first within ``confirm_budget_rounds``
   per analysis (:mod:`netcheck.analysis.confirm_budget`; the rest waits for the next
   analysis, its pairs' wait counts kept in memory per profile, so a restart resets
   them to the margin order and nothing else); a
   confirmed group becomes a ``shared-backend`` flag, an unconfirmed one a ``cleared``
   record (it stays in screening).
4. **Persistent slowness** after every analysis, over the same window
   (:func:`~netcheck.analysis.slowness.persistent_slowness`, with the config's
   ``slowness_floor``, ``slowness_alpha`` and ``slowness_min_rounds``): its rejections and
   nominees are judged on rounds loading each alone (:mod:`netcheck.coordinator.alone`),
   which raises the ``slow`` flags (with ``SlownessConfig.direct_flags`` a rejection
   is a flag by itself, the behaviour before session 6).
5. **After every round** (:meth:`Screening.after_round`): the per-round checks of
   :mod:`netcheck.coordinator.checks` (answer-level proof, capacity strikes, the relay
   test).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from netcheck.analysis.alone import AloneConfig
from netcheck.analysis.confirm import ConfirmationObservation, ConfirmConfig
from netcheck.analysis.confirm_run import ConfirmationRun
from netcheck.analysis.detectors import DetectorConfig, SuspectGroup
from netcheck.analysis.schedule import MIN_SECRET_BYTES, rule_name
from netcheck.analysis.screening import Analysis, hmac_load_rule, round_kind
from netcheck.analysis.slowness import SlownessConfig, SlownessReport
from netcheck.config import CoordinatorConfig, Profile
from netcheck.coordinator import analysis_pass, checks
from netcheck.coordinator.confirm_batches import GroupOutcome
from netcheck.coordinator.group_flags import (
    already_flagged,
    prior_observations,
    shared_flags,
    store_group_flags,
)
from netcheck.coordinator.hooks import RoundHost
from netcheck.coordinator.jobs import ConfirmProgress
from netcheck.coordinator.rounds import run_round
from netcheck.coordinator.screening_timer import ScreeningTimer
from netcheck.errors import NetcheckError, RoundError, StorageUnavailable
from netcheck.keys import load_or_create_secret
from netcheck.records import (
    FlagStatus,
    NodeOutcome,
    NodeRecord,
    RoundKind,
    RoundPlan,
    RoundReport,
    StoredRounds,
)
from netcheck.storage.flags import jsonable

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger("netcheck.screening")


class DetectionHost(RoundHost, Protocol):
    """What detection needs of the coordinator: a round host with its configuration."""

    @property
    def config(self) -> CoordinatorConfig: ...


class Screening:
    """Detection state of one coordinator: secret, flag store, timer (module docstring).

    Created by the coordinator (a :class:`DetectionHost`), which attaches
    :meth:`after_round` to its round hooks; the schedule secret is
    read, or created on first start.

    Raises:
        ConfigError: the secret file is unusable.
        StorageError: the detection tables cannot be created.
    """

    def __init__(self, coord: DetectionHost) -> None:
        self.coord = coord
        self.config = coord.config
        self.flags = coord.flags
        self.secret = load_or_create_secret(
            coord.config.schedule_secret_path, "screening schedule secret", MIN_SECRET_BYTES
        )
        self.detector = DetectorConfig()
        self.confirm = ConfirmConfig()
        self.slowness = SlownessConfig(
            floor=self.config.slowness_floor,
            alpha=self.config.slowness_alpha,
            min_rounds=self.config.slowness_min_rounds,
        )
        self.alone = AloneConfig()
        # per profile: the slowness test's last look (analysis_pass.slowness)
        self.looks: dict[str, int] = {}
        # per profile: analyses each node pair's group waited unserved (in memory only)
        self.waits: dict[str, dict[frozenset[str], int]] = {}
        self.lock = asyncio.Lock()
        self._index: dict[str, int] = {}
        self.timer = ScreeningTimer(self)

    # -- lifecycle (netcheck.coordinator.screening_timer) ------------------------------

    def attach(self, app: web.Application) -> None:
        """Start the screening timer with ``app`` (if configured) and stop it on shutdown
        (:meth:`~netcheck.coordinator.screening_timer.ScreeningTimer.attach`)."""
        self.timer.attach(app)

    def start_timer(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """Run :meth:`tick` every ``screening_interval_s`` in the background."""
        self.timer.start(sleep)

    async def stop_timer(self) -> None:
        """Cancel the timer task, if any, and wait for it."""
        await self.timer.stop()

    async def tick(self) -> None:
        """One timer step: a screening round per profile with connected nodes, and the
        analysis + confirmation every ``screening_analyze_every`` rounds. Errors are
        logged, never raised (the timer keeps going)."""
        for name in sorted(self.coord.profiles):
            if self.timer.stopping or not self.coord.connected(name):
                continue
            try:
                async with self.lock:
                    if self.timer.stopping:  # shutdown began while an admin run held the lock
                        return
                    await self.screening_round(name)
                    if self.timer.stopping:  # the round ended aborted: nothing to analyse
                        return
                    if self._index[name] % self.config.screening_analyze_every == 0:
                        await self.analyse_and_confirm(name)
            except NetcheckError as exc:
                log.warning("screening timer, profile %s: %s", name, exc)
            except Exception:  # a bug (e.g. in the analysis): the timer keeps going
                log.exception("screening timer, profile %s: the round or its analysis failed "
                              "(a bug); the timer goes on", name)  # fmt: skip

    # -- rounds ------------------------------------------------------------------------

    async def screening_round(
        self, profile_name: str, context: Mapping[str, Any] | None = None
    ) -> RoundReport:
        """Run the next screening round of ``profile_name`` (every
        ``screening_full_every``-th is a full-load round); ``context`` is stored with
        its schedule (e.g. the capacity override, netcheck.coordinator.capacity_gate). A
        round that raises is not counted (the same kind is due at the next call).

        Raises:
            RoundError, StorageError: as :func:`~netcheck.coordinator.rounds.run_round`.
        """
        index = self._index.get(profile_name, 0)
        kind = round_kind(index, self.config.screening_full_every)
        if kind == RoundKind.FULL:
            report = await run_round(
                self.coord, profile_name, kind=RoundKind.FULL, rule="all", context=context
            )
        else:
            report = await run_round(
                self.coord, profile_name, kind=RoundKind.SCREENING, context=context,
                load=hmac_load_rule(self.secret, self.config.screening_load_probability),
                rule=rule_name(self.config.screening_load_probability),
            )  # fmt: skip
        # counted once it ran: a refused round (checks held, no node, the plan not
        # stored) is the one due at the next try, so no full round or analysis is skipped
        self._index[profile_name] = index + 1
        return report

    async def run(
        self,
        profile_name: str,
        n_rounds: int,
        *,
        progress: Callable[[int, int], None] | None = None,
        cancel: asyncio.Event | None = None,
        context: Mapping[str, Any] | None = None,
        confirming: ConfirmProgress | None = None,
    ) -> dict[str, Any]:
        """``n_rounds`` screening rounds, then analysis and confirmation (the admin
        ``POST /admin/screening``). Returns a JSON-ready report with the flags raised.

        ``progress(done, total)`` is called after each round; ``confirming`` is kept up
        to date through the analysis and confirmation. When ``cancel`` is set,
        no further round starts (the one running finishes and is stored), analysis and
        confirmation are skipped, and the report carries ``"cancelled": true``; set (or
        the coordinator shutting down) during the confirmation, it stops the
        confirmation unjudged (:meth:`analyse_and_confirm`) and the report carries
        ``"cancelled": true`` and ``"halted"`` (the cause).

        Raises:
            RoundError: unknown profile, ``n_rounds < 0``, or no node connected.
        """
        analysis_pass.known_profile(self.coord, profile_name)
        if n_rounds < 0:
            raise RoundError("rounds must be >= 0")
        cancelled = False
        async with self.lock:
            reports = []
            for _ in range(n_rounds):
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    break
                reports.append(await self.screening_round(profile_name, context))
                if progress is not None:
                    progress(len(reports), n_rounds)
            if cancelled:
                outcome: dict[str, Any] = {"profile": profile_name, "analysis": None, "confirmations": [],
                           "flag_ids": []}  # fmt: skip
            else:
                outcome = await self.analyse_and_confirm(profile_name, confirming, cancel)
        # a confirmation stopped by the cancel or a shutdown: cancelled too (not judged)
        outcome["cancelled"] = cancelled or bool(outcome.get("halted"))
        round_flags = [f for r in reports for f in r.flags]
        outcome["rounds"] = [{"round_id": r.round_id, "kind": r.kind,
                              "loaded": sorted(k for k, b in r.schedule.items() if b),
                              "counts": dict(Counter(str(o.verdict) for o in r.outcomes))}
                             for r in reports]  # fmt: skip
        outcome["flags"] = [
            self._brief(i) for i in sorted(set(round_flags) | set(outcome["flag_ids"]))
        ]
        return jsonable(outcome)  # type: ignore[return-value]

    def _brief(self, flag_id: int) -> dict[str, Any]:
        flag = self.flags.get_flag(flag_id)
        if flag is None:
            return {"flag_id": flag_id}
        brief = flag.as_dict()
        brief.pop("evidence", None)
        return brief

    # -- analysis and confirmation (netcheck.coordinator.analysis_pass) ------------------

    async def analyse_and_confirm(
        self, profile_name: str, confirming: ConfirmProgress | None = None,
        cancel: asyncio.Event | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """:func:`~netcheck.coordinator.analysis_pass.analyse_and_confirm` of this coordinator."""
        return await analysis_pass.analyse_and_confirm(self, profile_name, confirming, cancel)

    async def confirm_waiting(
        self, profile: Profile, groups: Sequence[SuspectGroup], stored: StoredRounds,
        analysis: Analysis, progress: ConfirmProgress | None = None,
        cancel: asyncio.Event | None = None,
    ) -> list[GroupOutcome]:  # fmt: skip
        """:func:`~netcheck.coordinator.analysis_pass.confirm_waiting` of this coordinator."""
        return await analysis_pass.confirm_waiting(self, profile, groups, stored, analysis,
                                                   progress, cancel)  # fmt: skip

    async def _slowness(
        self, profile: Profile, stored: StoredRounds
    ) -> tuple[list[int], SlownessReport]:
        """:func:`~netcheck.coordinator.analysis_pass.slowness` of this coordinator."""
        return await analysis_pass.slowness(self, profile, stored)

    async def confirm_group(
        self, profile: Profile, group: SuspectGroup, stored: StoredRounds, analysis: Analysis
    ) -> tuple[ConfirmationRun, list[int]]:
        """:func:`~netcheck.coordinator.analysis_pass.confirm_group` of this coordinator.

        Raises:
            RoundError: the group was not run, or stopped before its first look."""
        return await analysis_pass.confirm_group(self, profile, group, stored, analysis)

    def _shared_flags(self, profile: str, status: FlagStatus | None) -> list[list[str]]:
        """Node sets of the ``shared-backend`` and ``declared-host`` flags of ``profile``."""
        return shared_flags(self.flags, profile, status)

    def _already_flagged(self, profile: str, members: Sequence[str]) -> bool:
        """Every pair of ``members`` is already inside one confirmed flag."""
        return already_flagged(self.flags, profile, members)

    def _prior_observations(
        self, profile: str, members: Sequence[str], deadline_s: float,
        schedules: dict[str, dict[str, bool]],
    ) -> tuple[ConfirmationObservation, ...]:  # fmt: skip
        """:func:`~netcheck.coordinator.group_flags.prior_observations` of this coordinator."""
        return prior_observations(self.flags, self.config, profile, members, deadline_s,
                                  schedules)  # fmt: skip

    def _store_group_flags(
        self, profile: Profile, group: SuspectGroup, stored: StoredRounds, analysis: Analysis,
        run: ConfirmationRun, schedules: Mapping[str, dict[str, bool]], *,
        cleared_record: bool = True,
    ) -> list[int]:  # fmt: skip
        """:func:`~netcheck.coordinator.group_flags.store_group_flags` of this coordinator."""
        return store_group_flags(self.flags, self.config, self.detector, profile, group, stored,
                                 analysis, run, schedules,
                                 cleared_record=cleared_record)  # fmt: skip

    # -- per-round checks ------------------------------------------------------------------

    async def after_round(
        self,
        profile: Profile,
        plan: RoundPlan,
        outcomes: Sequence[NodeOutcome],
        records: Mapping[str, NodeRecord],
        *,
        strict: bool = False,
    ) -> list[int]:
        """Answer-level proof, capacity strikes, the relay test and answer failures after
        a recorded round; returns the ids of the flags raised or added to. Storage errors are logged, not raised (the round stands); with ``strict``, a transient one
        (:class:`StorageUnavailable`: locked, unreachable) is raised after the log, so
        the caller can run the checks again (each is idempotent for a round it has
        counted, docs/spool.md)."""
        try:
            ids = await asyncio.to_thread(checks.result_sharing, self.flags, profile, plan, records)
            ids += await asyncio.to_thread(
                checks.capacity, self.flags, self.config, profile, plan.round_id, outcomes
            )
            ids += await asyncio.to_thread(
                checks.relay, self.flags, profile, plan.round_id, records
            )
            ids += await asyncio.to_thread(
                checks.answer_failure, self.flags, self.config, profile, plan.round_id, outcomes
            )
        except NetcheckError as exc:
            log.error("round %s: detection checks failed: %s", plan.round_id, exc)
            if strict and isinstance(exc, StorageUnavailable):
                raise
            return []
        return ids
