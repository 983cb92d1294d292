"""Detection in the running coordinator: screening rounds, analysis, confirmation, flags.

docs/detection.md describes the method; the statistics are the pure functions of
:mod:`netcheck.analysis` (:mod:`~netcheck.analysis.screening` for the analysis,
:mod:`~netcheck.analysis.evidence` for the flags' evidence documents). This module wires
them to live rounds and to storage:

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
import contextlib
import itertools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from netcheck.analysis import evidence as ev
from netcheck.analysis.alone import AloneConfig
from netcheck.analysis.coins import COIN_RULE
from netcheck.analysis.confirm import (
    ConfirmationObservation,
    ConfirmConfig,
)
from netcheck.analysis.confirm_budget import BUDGET_SPENT, next_waits
from netcheck.analysis.confirm_run import ConfirmationRun
from netcheck.analysis.detectors import DetectorConfig, SuspectGroup
from netcheck.analysis.schedule import MIN_SECRET_BYTES, rule_name
from netcheck.analysis.screening import (
    SCREEN_KINDS,
    Analysis,
    analyse,
    hmac_load_rule,
    round_kind,
)
from netcheck.analysis.slowness import SlownessConfig, SlownessReport, persistent_slowness
from netcheck.config import CoordinatorConfig, Profile
from netcheck.coordinator import checks
from netcheck.coordinator.alone import confirm_alone, slow_nodes
from netcheck.coordinator.confirm_batches import (
    ALREADY_FLAGGED,
    GroupOutcome,
    confirm_groups,
    halted,
    not_judged,
    pool_short,
    set_aside,
    unserved,
)
from netcheck.coordinator.group_flags import (
    prior_observations,
    shared_flags,
    store_group_flags,
)
from netcheck.coordinator.hooks import RoundHost
from netcheck.coordinator.jobs import ConfirmProgress
from netcheck.coordinator.rounds import run_round
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

#: At shutdown, how long the app's cleanup waits for a timer round in flight to end as
#: ``aborted`` (:meth:`Screening.attach`). Its sessions are closed by then, so it ends
#: in well under a second unless the database is down: then ``storage_retry_s`` (10 s
#: by default) of retries before the spool. After this the timer task is cancelled.
TIMER_STOP_GRACE_S = 30.0


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
        self._analyses: dict[str, int] = {}
        # per profile: analyses each node pair's group waited unserved (in memory only)
        self.waits: dict[str, dict[frozenset[str], int]] = {}
        self.lock = asyncio.Lock()
        self._index: dict[str, int] = {}
        self._timer: asyncio.Task[None] | None = None
        self._timer_sleeping = False  # the timer waits between ticks (safe to cancel)
        self._stopping = False  # shutdown began: the timer starts no further round

    # -- lifecycle ---------------------------------------------------------------------

    def attach(self, app: web.Application) -> None:
        """Start the screening timer with ``app`` (if configured) and stop it on shutdown.

        At shutdown a timer round in flight ends like any round then (an admin-run one
        included): the coordinator's ``on_shutdown`` closes the sessions and the round
        is stored ``aborted`` (reason ``shutdown``, no verdicts, no node blamed;
        :func:`~netcheck.coordinator.rounds.run_round`). So ``on_shutdown`` here only
        stops the timer from starting another round (cancelling it at once when it
        waits between rounds), and ``on_cleanup``, which runs after every
        ``on_shutdown``, waits for the round in flight (at most
        :data:`TIMER_STOP_GRACE_S`) before cancelling the timer. Cancelling the round
        itself would leave it ``planned`` until the next start marks it aborted.
        """
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        app.on_cleanup.append(self._on_cleanup)

    async def _on_startup(self, app: web.Application) -> None:
        self._stopping = False
        if self.config.screening_interval_s > 0:
            self.start_timer()

    async def _on_shutdown(self, app: web.Application) -> None:
        self._stopping = True
        if self._timer_sleeping:
            await self.stop_timer()

    async def _on_cleanup(self, app: web.Application) -> None:
        timer = self._timer
        if timer is not None and not timer.done():
            try:
                await asyncio.wait_for(asyncio.shield(timer), TIMER_STOP_GRACE_S)
            except TimeoutError:
                log.warning("screening timer: the round in flight did not end within %.0f s "
                            "of shutdown; cancelled", TIMER_STOP_GRACE_S)  # fmt: skip
        await self.stop_timer()

    def start_timer(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """Run :meth:`tick` every ``screening_interval_s`` in the background."""
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._timer_loop(sleep))

    async def stop_timer(self) -> None:
        """Cancel the timer task, if any, and wait for it."""
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None

    async def _timer_loop(self, sleep: Callable[[float], Awaitable[None]]) -> None:
        log.info("screening timer: one round per profile every %.1f s",
                 self.config.screening_interval_s)  # fmt: skip
        while not self._stopping:
            self._timer_sleeping = True
            try:
                await sleep(self.config.screening_interval_s)
            finally:
                self._timer_sleeping = False
            if self._stopping:
                break
            await self.tick()

    async def tick(self) -> None:
        """One timer step: a screening round per profile with connected nodes, and the
        analysis + confirmation every ``screening_analyze_every`` rounds. Errors are
        logged, never raised (the timer keeps going)."""
        for name in sorted(self.coord.profiles):
            if self._stopping or not self.coord.connected(name):
                continue
            try:
                async with self.lock:
                    if self._stopping:  # shutdown began while an admin run held the lock
                        return
                    await self.screening_round(name)
                    if self._stopping:  # the round ended aborted: nothing to analyse
                        return
                    if self._index[name] % self.config.screening_analyze_every == 0:
                        await self.analyse_and_confirm(name)
            except NetcheckError as exc:
                log.warning("screening timer, profile %s: %s", name, exc)
            except Exception:  # a bug (e.g. in the analysis): the timer keeps going
                log.exception("screening timer, profile %s: the round or its analysis failed "
                              "(a bug); the timer goes on", name)  # fmt: skip

    # -- rounds ------------------------------------------------------------------------

    def _profile(self, name: str) -> Profile:
        profile = self.coord.profiles.get(name)
        if profile is None:
            raise RoundError(f"unknown profile {name!r}")
        return profile

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
        self._profile(profile_name)
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

    # -- analysis and confirmation -------------------------------------------------------

    async def analyse_and_confirm(
        self, profile_name: str, confirming: ConfirmProgress | None = None,
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
        """
        confirming = confirming or ConfirmProgress()
        confirming.stage = "analysis"
        profile = self._profile(profile_name)
        deadline_s = profile.deadline_s(0.0)
        kinds = (RoundKind.SCREENING,) if self.detector.drop_full_rounds else SCREEN_KINDS
        stored = await asyncio.to_thread(
            partial(self.flags.recent_rounds, kind_rules=[(RoundKind.CONFIRMATION, COIN_RULE)]),
            profile.name, kinds, self.config.screening_window_rounds,
        )  # fmt: skip
        flag_ids: list[int] = []
        confirmations: list[dict[str, Any]] = []
        if len(stored.round_ids) < 2:
            return {"profile": profile.name, "analysis": None, "confirmations": [],
                    "flag_ids": []}  # fmt: skip
        analysis = await asyncio.to_thread(analyse, stored, deadline_s, self.detector)
        summary = ev.detection_summary(analysis)
        summary["load_probability"] = self.config.screening_load_probability
        screened = stored  # the slowness test reads screening rounds only (its docstring)
        if any(stored.kinds.get(r) == RoundKind.CONFIRMATION for r in stored.round_ids):
            screened = await asyncio.to_thread(
                self.flags.recent_rounds, profile.name, kinds, self.config.screening_window_rounds
            )
        slow_ids, slow_report = await self._slowness(profile, screened)
        flag_ids += slow_ids
        log.info(
            "screening analysis %s: %d nodes x %d rounds, %d edges, %d suspect groups",
            profile.name, summary["n_nodes"], summary["n_rounds"], len(summary["edges"]),
            len(summary["groups"]),
        )  # fmt: skip
        outcomes = await self.confirm_waiting(profile, analysis.detection.groups, stored,
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
                     self.config.confirm_budget_rounds)  # fmt: skip
        confirmations = [res.as_dict() for res in outcomes]
        dry: list[dict[str, Any]] = []  # nominees the canary pool left unjudged alone
        if not halted(self, cancel):
            skip = await asyncio.to_thread(slow_nodes, self.flags, profile.name)
            flag_ids += await confirm_alone(self.coord, self.flags, profile, slow_report,
                                            self.alone, skip, screened.results, confirming,
                                            partial(halted, self, cancel), dry)  # fmt: skip
        out = {"profile": profile.name, "analysis": summary, "confirmations": confirmations,
               "flag_ids": flag_ids}  # fmt: skip
        if dry:
            out["alone_pool_short"] = dry
        if cause := halted(self, cancel):  # in the groups' stage or the alone stage
            log.warning("screening analysis %s: confirmation stopped, not judged: %s",
                        profile.name, cause)  # fmt: skip
            out["halted"] = cause
        return out

    async def confirm_waiting(
        self, profile: Profile, groups: Sequence[SuspectGroup], stored: StoredRounds,
        analysis: Analysis, progress: ConfirmProgress | None = None,
        cancel: asyncio.Event | None = None,
    ) -> list[GroupOutcome]:  # fmt: skip
        """One analysis's :func:`confirm_groups`, longest-waiting first by the profile's
        wait counts (:attr:`waits`), which it then advances
        (:func:`~netcheck.analysis.confirm_budget.next_waits`: the pairs of the groups
        the budget left unserved count one more analysis, those of the groups set aside
        for a short canary pool or a halt keep their count
        (:func:`~netcheck.coordinator.confirm_batches.set_aside`), the rest drop). The counts
        are kept in memory only: a restart resets the order to the margin order (no
        evidence or attempt is lost; those are stored)."""
        outcomes = await confirm_groups(self, profile, groups, stored, analysis,
                                        batching=self.config.confirm_batching,
                                        progress=progress, cancel=cancel,
                                        waits=self.waits.get(profile.name))  # fmt: skip
        self.waits[profile.name] = next_waits([g.members for g in groups], unserved(outcomes),
                                              self.waits.get(profile.name, {}),
                                              set_aside(outcomes))  # fmt: skip
        return outcomes

    async def _slowness(
        self, profile: Profile, stored: StoredRounds
    ) -> tuple[list[int], SlownessReport]:
        """The persistent-slowness test over ``stored`` as the next look: the larger of
        this process's analyses of the profile and the stored screening and full rounds
        / ``screening_analyze_every`` (survives a restart); returns flag ids (none
        unless ``direct_flags``) and the report (its rejections and nominees are
        confirmed alone after the contention confirmations). Each round is judged at
        the load probability its stored schedule rule carries
        (:func:`~netcheck.coordinator.checks.stored_load_probabilities`; others at the
        configured one), each node at the largest null rate and nomination floor over
        its rounds: a window that still holds rounds of a larger ``q`` than the
        configured one is not judged at the smaller null."""
        count = await asyncio.to_thread(self.flags.count_rounds, profile.name, SCREEN_KINDS)
        look = max(self._analyses.get(profile.name, 0) + 1,
                   -(-count // self.config.screening_analyze_every))  # fmt: skip
        self._analyses[profile.name] = look
        round_q = await asyncio.to_thread(checks.stored_load_probabilities, self.flags,
                                          stored.round_ids)  # fmt: skip
        report = persistent_slowness(stored, profile.reference_t_s, look, self.slowness,
                                     self.config.screening_load_probability, round_q)  # fmt: skip
        ids = await asyncio.to_thread(checks.slowness, self.flags, profile, stored, report)
        return ids, report

    def _shared_flags(self, profile: str, status: FlagStatus | None) -> list[list[str]]:
        """Node sets of the ``shared-backend`` and ``declared-host`` flags of ``profile``."""
        return shared_flags(self.flags, profile, status)

    def _already_flagged(self, profile: str, members: Sequence[str]) -> bool:
        """Every pair of ``members`` is already inside one confirmed flag."""
        flagged = [set(f) for f in self._shared_flags(profile, FlagStatus.CONFIRMED)]
        return all(
            any({a, b} <= f for f in flagged)
            for a, b in itertools.combinations(sorted(set(members)), 2)
        )

    async def confirm_group(
        self, profile: Profile, group: SuspectGroup, stored: StoredRounds, analysis: Analysis
    ) -> tuple[ConfirmationRun, list[int]]:
        """Confirmation rounds for one suspect group alone (:func:`confirm_groups` with
        one group, in planned order); stores one ``shared-backend`` flag per confirmed
        clique, or one ``cleared`` record; returns the run and the flag ids.

        Raises:
            RoundError: a member is not connected, or its first look does not fit in
                ``confirm_budget_rounds`` (nothing is run or stored), or the run
                stopped before its first look (nothing stored).
        """
        (res,) = await confirm_groups(self, profile, [group], stored, analysis, batching=False)
        if res.run is None:
            raise RoundError(res.reason or "not run")
        return res.run, res.ids

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
