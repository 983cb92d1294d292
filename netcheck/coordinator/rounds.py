"""The round runner: executes a pure :class:`RoundPlan` over live sessions.

Steps (docs/design.md, "A round"): measure echo and compute-probe RTTs, plan (pure),
persist plan, schedule and spend canaries, dispatch encrypted jobs, wait for acks,
release every node in one tight loop, collect results, verify (pure), record verdicts,
then the round's hooks (:class:`~netcheck.coordinator.hooks.RoundHooks`: the detection
checks of docs/detection.md, metrics). All times are on the coordinator's monotonic
clock (``time.monotonic_ns``); wall time is stored only as the round's start.

The runner sees the coordinator only as a :class:`~netcheck.coordinator.hooks.RoundHost`;
it imports neither the server nor detection nor web/.

A round has a *load set*: only loaded nodes get a job. ``kind`` is ``full`` (every node
loaded), ``screening`` (the secret schedule: each node loaded with probability
``screening_load_probability``) or ``confirmation`` (a suspect group
or one member). The full schedule, loaded or not, of every node connected with the
profile is stored with the round (``round_schedules``), so the detectors see the
unloaded nodes too.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import random
import secrets
import statistics
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from netcheck.config import Profile
from netcheck.coordinator.collect import judge, report_timing
from netcheck.coordinator.dispatch import dispatch
from netcheck.coordinator.hooks import RoundHost
from netcheck.coordinator.late_checks import after_round_checks, refuse_while_checks_held
from netcheck.coordinator.notices import send_in_background
from netcheck.coordinator.planner import PlanNode, plan_round
from netcheck.coordinator.pool import classify_skip, warn_low_pool
from netcheck.coordinator.rtt import RttProber
from netcheck.coordinator.session import WRITE_TIMEOUT_S, NodeSession
from netcheck.errors import LocalProtocolError, RoundError, StorageError
from netcheck.logs import node_label
from netcheck.protocol.messages import Release
from netcheck.records import (
    Assignment,
    NodeTiming,
    RoundKind,
    RoundReport,
    RoundStatus,
    Verdict,
)
from netcheck.workloads import get_workload
from netcheck.workloads.reservoir import decoy_target

log = logging.getLogger("netcheck.round")

#: A load set, or a rule that draws one from the round id and the connected node keys.
LoadSpec = Collection[str] | Callable[[str, Sequence[str]], Collection[str]]


def new_round_id() -> str:
    """A unique, sortable round id such as ``r20261130T031500-a1b2c3``."""
    return time.strftime("r%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


async def _measure_rtts(
    rtt: RttProber,
    sessions: Sequence[NodeSession],
    timing: dict[str, NodeTiming],
    others: Sequence[NodeSession] = (),
) -> int:
    """Each node's echo and probe RTTs for the round: the sample set the background
    prober took since the node's previous round, or one taken now (all such nodes at
    once, under one deadline; :mod:`netcheck.coordinator.rtt`); ``others`` (connected,
    not loaded) are sampled now on the same rule, so these echoes do not reveal the
    load bit. Returns how many sets were taken now."""
    return await rtt.for_round(sessions, timing, others)


async def _release(
    round_id: str,
    ready: Sequence[tuple[NodeSession, Assignment]],
    timing: dict[str, NodeTiming],
    write_timeout_s: float = WRITE_TIMEOUT_S,
    local_failures: dict[str, str] | None = None,
) -> None:
    """Write every ready node's ``release`` frame in one tight loop, in a fresh random
    order each round (so no node is always first or last), stamping each node's own
    write (``release_start_ns``/``release_end_ns``; its latency is measured from its own
    stamp, so its place in the order does not count against it).

    Frames are sealed ahead while holding every session's send lock, so the loop does
    nothing but socket writes and clock reads (architecture.md, "Release"); the garbage
    collector is off for the loop, so a collection cannot stall one write.
    """
    ready = list(ready)
    secrets.SystemRandom().shuffle(ready)
    sessions = [s for s, _ in ready]
    for s in sessions:
        await s.send_lock.acquire()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a full collection mid-loop held one write 16-38 ms in the benchmark
    try:
        frames: list[bytes | None] = []
        for s, a in ready:
            if s.gone():  # the node ended its session (e.g. broke the protocol after its ack)
                log.warning("round %s: node %s gone before release", round_id, s.label)
                frames.append(None)  # no release: it acked, then left: missing
                continue
            if not s.holds_job(round_id):
                # It reported an error for the job after its ack (allowed, §6.2), read while
                # this loop waited for a lock: its report is its answer (`missing`), and a
                # release would now be our own protocol error (`coordinator-error`).
                log.warning("round %s: node %s gave up its job before release", round_id, s.label)
                frames.append(None)
                continue
            try:
                frames.append(s.seal(Release(round_id=round_id, job_key=a.job_key)))
            except LocalProtocolError as exc:  # our failure (counter exhausted), not the node's
                if local_failures is not None:
                    local_failures[s.node_key] = f"coordinator could not send the release: {exc}"
                log.error("round %s: node %s: %s", round_id, s.label, exc)
                frames.append(None)
        for i, ((s, _), frame) in enumerate(zip(ready, frames, strict=True)):
            if frame is None:
                continue
            t = timing[s.node_key]
            t.release_index = i
            t.release_start_ns = time.monotonic_ns()
            try:
                # Bounded like dispatch: a node that stops reading is aborted, not waited for.
                await s.write_bounded(frame, write_timeout_s, "release")
            except ConnectionError:
                log.warning("round %s: node %s gone at release", round_id, s.label)
            t.release_end_ns = time.monotonic_ns()
    finally:
        if gc_was_enabled:
            gc.enable()
        for s in sessions:
            s.send_lock.release()


ROUND_KINDS = tuple(k.value for k in RoundKind)


async def run_round(
    coord: RoundHost,
    profile_name: str,
    *,
    load: LoadSpec | None = None,
    kind: str = "full",
    rule: str | None = None,
    context: Mapping[str, Any] | None = None,
    rng: random.Random | None = None,
) -> RoundReport:
    """Run one validation round for the nodes connected with ``profile_name``.

    Args:
        load: the node keys that get a job (``None``: every connected node), or a rule
            called as ``load(round_id, connected_node_keys)`` inside the round lock, so
            the schedule covers exactly the nodes connected at that moment. Keys not
            connected are ignored.
        kind: ``full``, ``screening`` or ``confirmation``; stored with the schedule.
        rule: how the load bits were drawn, stored with the schedule (default ``all``
            without ``load``, else ``explicit``).
        context: extra JSON stored with the schedule (e.g. the suspect group).
        rng: randomness of the planner (default ``random.SystemRandom()``).

    Raises:
        RoundError: unknown profile or kind, or no node connected with the profile.
        StorageError: the plan or the outcome could not be persisted (the round is
            then not acknowledged to the operator as done).

    Once the outcome is persisted the report is returned: after-round checks that the
    database refuses or that raise a bug are kept for later
    (:func:`~netcheck.coordinator.late_checks.after_round_checks`), never raised here.
    """
    profile = coord.profiles.get(profile_name)
    if profile is None:
        raise RoundError(f"unknown profile {profile_name!r}")
    if kind not in ROUND_KINDS:
        raise RoundError(f"unknown round kind {kind!r}; expected one of {ROUND_KINDS}")
    if rule is None:
        rule = "all" if load is None else "explicit"
    async with coord.round_lock:
        with coord.rtt.holding():  # no RTT sample is taken while nodes run a round
            return await _run_locked(
                coord, profile, rng or random.SystemRandom(), load, kind, rule, context
            )


async def _run_locked(
    coord: RoundHost,
    profile: Profile,
    rng: random.Random,
    load: LoadSpec | None,
    kind: str,
    rule: str,
    context: Mapping[str, Any] | None,
) -> RoundReport:
    connected = coord.connected(profile.name)
    if not connected:
        raise RoundError(f"no node connected with profile {profile.name!r}")
    await refuse_while_checks_held(coord)
    round_id = new_round_id()
    keys = sorted(s.node_key for s in connected)
    if load is None:
        chosen: set[str] = set(keys)
    elif callable(load):
        chosen = set(load(round_id, keys))
    else:
        chosen = set(load)
    schedule = {k: k in chosen for k in keys}
    sessions = [s for s in connected if schedule[s.node_key]]
    by_key = {s.node_key: s for s in sessions}
    timing = {s.node_key: NodeTiming() for s in sessions}
    store = coord.store
    t0 = time.monotonic()

    idle = [s for s in connected if not schedule[s.node_key]]
    inline_sets = await _measure_rtts(coord.rtt, sessions, timing, idle)
    t_sampled = time.monotonic()
    for s in sessions:
        timing[s.node_key].rtt_s = s.rtt_s
        timing[s.node_key].deadline_s = profile.deadline_s(s.rtt_s or 0.0)

    # Plan (pure) and persist before anything reaches a node.
    # Each node draws at most canaries_max of its fingerprint's canaries: read exactly
    # that many per fingerprint (reading 4x the whole round's need per fingerprint was
    # a third of the plan time at 1,000 nodes; docs/scaling.md, "Planning").
    per_fp = collections.Counter(s.fingerprint_id for s in sessions)
    pool = {
        fp: await asyncio.to_thread(
            store.unspent_canaries, fp, profile.canaries_max * n, profile=profile.name
        )
        for fp, n in per_fp.items()
    }
    t_pool = time.monotonic()
    # Decoys come from worker processes that generated them ahead (between rounds),
    # not from this thread: an H200 round at 1,000 nodes is ~40 s of generator CPU
    # (netcheck/workloads/reservoir.py, docs/scaling.md "Planning").
    workload = get_workload(profile)
    plan = await asyncio.to_thread(  # pure and CPU-bound: keep the event loop free
        plan_round,
        round_id, [PlanNode(s.node_key, s.fingerprint_id) for s in sessions], pool, profile, rng,
        coord.decoys.source(workload),
    )  # fmt: skip
    t_drawn = time.monotonic()
    recorder = coord.recorder  # bounded retry, then the spool (docs/spool.md)
    spent = [c for a in plan.assignments for c in a.canary_ids]
    await asyncio.to_thread(recorder.record_plan, plan, time.time())
    skipped: dict[str, tuple[Verdict, str]] = {}  # classified now: the database is up
    try:
        for node_key, reason in plan.skipped:
            sk = by_key[node_key]
            skipped[node_key] = await asyncio.to_thread(
                classify_skip, store, profile, sk.fingerprint_id, reason, sk.claim.fingerprint
            )
        await asyncio.to_thread(warn_low_pool, store, profile, sessions)
        await asyncio.to_thread(
            recorder.call, f"record schedule {round_id}",
            lambda: coord.flags.record_schedule(
                round_id, profile.name, kind, rule, schedule, context
            ),
        )  # fmt: skip
    except StorageError as exc:  # nothing sent yet; the round must not stay `planned`
        await asyncio.to_thread(
            recorder.end_round, round_id, [], {}, status="aborted",
            summary={"reason": f"storage: {exc}"}, canary_ids=spent,
        )  # fmt: skip
        raise
    t_planned = time.monotonic()
    log.info(
        "round %s (%s) planned: %d of %d nodes loaded, %d skipped, B=%d, RTT sets taken now %d",
        round_id, kind, len(plan.assignments), len(keys), len(plan.skipped), plan.batch_size,
        inline_sets,
    )  # fmt: skip

    # Dispatch and wait for acknowledgements.
    local_failures: dict[str, str] = {}  # the coordinator's own failures: blame no node
    acks = await dispatch(plan, profile, by_key, timing, local_failures)
    if acks:
        await asyncio.wait(acks.values(), timeout=profile.dispatch_timeout_s)
    ready: list[tuple[NodeSession, Assignment]] = []
    for a in plan.assignments:
        ack = acks.get(a.node_key)
        if ack is not None and ack.done() and ack.exception() is None:
            timing[a.node_key].acked_ns = ack.result()
            ready.append((by_key[a.node_key], a))
    t_dispatched = time.monotonic()

    # Release, then collect.
    results = {s.node_key: s.expect_result(round_id) for s, _ in ready}
    await _release(round_id, ready, timing, profile.dispatch_timeout_s, local_failures)
    t_released = time.monotonic()
    first_release_ns = min(
        (t.release_start_ns for t in timing.values() if t.release_start_ns is not None),
        default=None,
    )
    if results:
        await asyncio.wait(results.values(), timeout=profile.result_timeout_s)
    t_collected = time.monotonic()
    # The next round's decoys, generated while this one is verified and stored.
    coord.decoys.top_up(workload, decoy_target(profile.batch_size * len(sessions)))
    if coord.stopping:
        # The coordinator is shutting down and closed the sessions itself: no node is to
        # blame. Canaries stay spent (they were revealed); no verdict is recorded.
        log.warning("round %s aborted: coordinator shutting down", round_id)
        await asyncio.to_thread(
            recorder.end_round, round_id, [], {}, status="aborted",
            summary={"reason": "shutdown"}, canary_ids=spent,
        )  # fmt: skip
        return RoundReport(round_id, profile.name, "aborted", kind=kind, schedule=schedule)

    # Verify (pure) and record.
    outcomes, records, mismatch = judge(
        plan, by_key, timing, results, local_failures, skipped, first_release_ns
    )
    t_verified = time.monotonic()

    starts = [t.release_start_ns for t in timing.values() if t.release_start_ns is not None]
    ends = [t.release_end_ns for t in timing.values() if t.release_end_ns is not None]
    elapsed = [o.elapsed_s for o in outcomes if o.elapsed_s is not None]
    phases = {
        "plan_s": t_planned - t0,
        # plan_s = sampling (echo and probe RTTs) + pool read + planner + persisting
        "plan_sampling_s": t_sampled - t0,
        "plan_pool_s": t_pool - t_sampled,
        "plan_draw_s": t_drawn - t_pool,
        "plan_persist_s": t_planned - t_drawn,
        "dispatch_s": t_dispatched - t_planned,
        "release_skew_s": (max(ends) - min(starts)) / 1e9 if starts else 0.0,
        "release_loop_s": t_released - t_dispatched,
        "compute_median_s": statistics.median(elapsed) if elapsed else 0.0,
        "collect_s": t_collected - t_released,
        "verify_s": t_verified - t_collected,
        "total_s": t_verified - t0,
    }
    # Persist before acknowledging: the verdict notices and the report go out only once
    # the results are in the database or, if it stays unavailable, in the fsynced spool.
    how = await asyncio.to_thread(
        recorder.end_round, round_id, outcomes, records, status="complete", summary=phases,
        canary_ids=spent, checks=True,
    )  # fmt: skip
    status = RoundStatus.COMPLETE if how == "recorded" else RoundStatus.SPOOLED
    for s in sessions:
        s.forget_round(round_id)
    for o in outcomes:
        log.info(
            "round %s node %s verdict=%s %s", round_id, node_label(o.node_key), o.verdict, o.reason
        )
    send_in_background(  # each loaded node's signed verdict (docs/protocol.md §5.11)
        coord.identity, round_id, outcomes, by_key,
        {k: t.deadline_s for k, t in timing.items()}, mismatch,
    )  # fmt: skip
    flag_ids: list[int] = []
    if status is RoundStatus.SPOOLED:  # the checks read and write the database
        log.warning("round %s: results spooled; its after-round checks run after the "
                    "replay (docs/spool.md)", round_id)  # fmt: skip
    else:
        flag_ids = await after_round_checks(coord, profile, plan, outcomes, records)
    report = RoundReport(
        round_id, profile.name, str(status), outcomes, phases, kind, schedule, flag_ids,
        {k: report_timing(t, first_release_ns) for k, t in timing.items()},
    )  # fmt: skip
    for observe in coord.round_hooks.finished:
        observe(report)
    return report
