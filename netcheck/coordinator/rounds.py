"""The round runner: executes a pure :class:`RoundPlan` over live sessions.

Steps (docs/design.md, "A round"): measure echo and compute-probe RTTs, plan (pure), persist plan, schedule and
spend canaries, dispatch encrypted jobs, wait for acks, release every node in one tight
loop, collect results, verify (pure), record verdicts, then the per-round detection
checks (answer-level sharing, capacity strikes; docs/detection.md). All times are on the
coordinator's monotonic clock (``time.monotonic_ns``); wall time is stored only as the
round's start.

A round has a *load set*: only loaded nodes get a job. ``kind`` is ``full`` (every node
loaded), ``screening`` (secret half-load schedule) or ``confirmation`` (a suspect group
or one member). The full schedule, loaded or not, of every node connected with the
profile is stored with the round (``round_schedules``), so the detectors see the
unloaded nodes too.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import statistics
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from netcheck.analysis.verdicts import Observation, verify
from netcheck.config import Profile
from netcheck.coordinator.planner import PlanNode, plan_round
from netcheck.coordinator.session import Arrival, NodeDisconnected, NodeSession
from netcheck.errors import RoundError
from netcheck.protocol.jobs import commitment, seal_job, verify_receipt
from netcheck.protocol.messages import Job, Release
from netcheck.records import (
    Assignment,
    NodeOutcome,
    NodeRecord,
    NodeTiming,
    RoundKind,
    RoundPlan,
    RoundReport,
    Verdict,
)
from netcheck.storage import Store
from netcheck.web.metrics import observe_round

if TYPE_CHECKING:
    from netcheck.coordinator.server import Coordinator

log = logging.getLogger("netcheck.round")

#: Echo samples per node before a round; the minimum is used (detection.md §2).
ECHO_SAMPLES = 3
ECHO_TIMEOUT_S = 2.0
#: Compute probes (docs/protocol.md §5.9) per node before a round, interleaved with the
#: echoes. A probe follows only an answered echo, and after the first unanswered probe
#: the round sends no more, so a silent node costs no probe timeout and a node that
#: ignores probes one. Timeout: the smaller of PROBE_TIMEOUT_S and ECHO_TIMEOUT_S.
PROBE_SAMPLES = 3
PROBE_TIMEOUT_S = 1.0


#: A load set, or a rule that draws one from the round id and the connected node keys.
LoadSpec = Collection[str] | Callable[[str, Sequence[str]], Collection[str]]


def _classify_skip(
    store: Store, profile: Profile, fingerprint_id: str, reason: str
) -> tuple[Verdict, str]:
    """Why a node got no job: its own fingerprint (profile-mismatch) or our references.

    A fingerprint with references, all spent, or a profile with no reference set at all,
    is the operator's problem (``unchecked``); a fingerprint unknown while the profile has
    references under another one is the node's (``profile-mismatch``).
    """
    build = f"build more with `netcheck reference build --profile {profile.name}`"
    if store.count_references(fingerprint_id) > 0:
        return Verdict.UNCHECKED, f"reference pool for this fingerprint used up: {build}"
    if store.count_references(profile=profile.name) == 0:
        return Verdict.UNCHECKED, f"no reference set for profile {profile.name}: {build}"
    return Verdict.PROFILE_MISMATCH, reason


#: Warn when fewer canaries than this many rounds' worth remain for a fingerprint.
LOW_POOL_ROUNDS = 10


def _warn_low_pool(store: Store, profile: Profile, sessions: Sequence[NodeSession]) -> None:
    per_fp: dict[str, int] = {}
    for s in sessions:
        per_fp[s.fingerprint_id] = per_fp.get(s.fingerprint_id, 0) + 1
    for fp, n in per_fp.items():
        left = store.count_references(fp, unspent_only=True)
        need = profile.canaries_max * n
        if store.count_references(fp) > 0 and left < need * LOW_POOL_ROUNDS:
            log.warning(
                "reference pool for fingerprint %s is low: %d unspent canaries left, about "
                "%d round(s) for %d node(s); build more with `netcheck reference build "
                "--profile %s`", fp[:12], left, left // max(need, 1), n, profile.name,
            )  # fmt: skip


def new_round_id() -> str:
    """A unique, sortable round id such as ``r20261130T031500-a1b2c3``."""
    return time.strftime("r%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


async def _measure_rtts(sessions: Sequence[NodeSession], timing: dict[str, NodeTiming]) -> None:
    """Echo RTT (min of ``ECHO_SAMPLES``) and compute-probe RTTs per node, interleaved
    (echo, probe, echo, probe, ...) so both see the same network; raw samples go to the
    node's :class:`NodeTiming`."""

    async def one(s: NodeSession) -> None:
        t = timing[s.node_key]
        samples = []
        probing = True
        for i in range(max(ECHO_SAMPLES, PROBE_SAMPLES)):
            rtt = None
            if i < ECHO_SAMPLES:
                rtt = await s.measure_rtt(secrets.randbits(62), ECHO_TIMEOUT_S)
                if rtt is not None:
                    samples.append(rtt)
            if probing and i < PROBE_SAMPLES and (rtt is not None or i >= ECHO_SAMPLES):
                probe = await s.measure_probe(
                    secrets.randbits(62),
                    secrets.token_bytes(32),
                    min(PROBE_TIMEOUT_S, ECHO_TIMEOUT_S),
                )
                if probe is None:
                    t.probe_missed += 1
                    probing = False
                elif probe.correct:
                    t.probe_samples_s.append(probe.rtt_s)
                else:
                    t.probe_wrong += 1
                    log.warning("node %s: wrong probe answer", s.label)
        s.rtt_s = min(samples) if samples else s.rtt_s
        t.echo_samples_s = samples
        t.probe_rtt_s = min(t.probe_samples_s) if t.probe_samples_s else None

    await asyncio.gather(*(one(s) for s in sessions))


async def _dispatch(
    plan: RoundPlan, profile: Profile, by_key: dict[str, NodeSession], timing: dict[str, NodeTiming]
) -> dict[str, asyncio.Future[int]]:
    acks: dict[str, asyncio.Future[int]] = {}

    async def one(a: Assignment) -> None:
        s = by_key[a.node_key]
        t = timing[a.node_key]
        job = Job(
            round_id=plan.round_id,
            nonce=a.job_nonce,
            ciphertext=seal_job(a.prompts, a.job_key, plan.round_id, a.job_nonce),
            batch_size=plan.batch_size,
            max_new_tokens=plan.max_new_tokens,
            deadline_s=float(t.deadline_s or 0.0),
        )
        acks[a.node_key] = s.expect_ack(plan.round_id)
        t.job_sent_ns = time.monotonic_ns()
        try:
            # Bounded: a node that stops reading fills its socket buffers, and the write
            # then waits for it to drain; without the bound one such node would hold up the
            # dispatch (hence the release) of every node until its heartbeat timed out.
            # The frame is queued whole before the wait, so a node that resumes in time
            # still gets the job and can ack it.
            await asyncio.wait_for(s.send(job), profile.dispatch_timeout_s)
        except TimeoutError:
            log.warning("round %s: node %s not reading (job send blocked)", plan.round_id, s.label)
        except ConnectionError:
            log.warning("round %s: node %s gone during dispatch", plan.round_id, s.label)

    await asyncio.gather(*(one(a) for a in plan.assignments))
    return acks


async def _release(
    round_id: str,
    ready: Sequence[tuple[NodeSession, Assignment]],
    timing: dict[str, NodeTiming],
) -> None:
    """Write every ready node's ``release`` frame in one tight loop.

    Frames are sealed ahead while holding every session's send lock, so the loop does
    nothing but socket writes and clock reads (architecture.md, "Release").
    """
    sessions = [s for s, _ in ready]
    for s in sessions:
        await s.send_lock.acquire()
    try:
        frames = [s.transport.seal(Release(round_id=round_id, job_key=a.job_key)) for s, a in ready]
        for (s, _), frame in zip(ready, frames, strict=True):
            t = timing[s.node_key]
            t.release_start_ns = time.monotonic_ns()
            try:
                await s.ws.send_bytes(frame)
            except ConnectionError:
                log.warning("round %s: node %s gone at release", round_id, s.label)
            t.release_end_ns = time.monotonic_ns()
    finally:
        for s in sessions:
            s.send_lock.release()


def _observe(
    s: NodeSession, a: Assignment, round_id: str, t: NodeTiming, fut: asyncio.Future[Arrival] | None
) -> Observation:
    base: dict[str, Any] = {"released_ns": t.release_start_ns}
    if fut is None or not fut.done():
        return Observation(
            arrived_ns=None, outputs=None, commitment=None, commitment_ok=False,
            signature_ok=False, disconnected=s.closed.is_set(), error=None, **base,
        )  # fmt: skip
    exc = fut.exception()
    if isinstance(exc, NodeDisconnected):
        return Observation(
            arrived_ns=None, outputs=None, commitment=None, commitment_ok=False,
            signature_ok=False, disconnected=True, error=None, **base,
        )  # fmt: skip
    arrival = fut.result()
    t.arrived_ns = arrival.arrived_ns
    res = arrival.result
    if res is None:
        return Observation(
            arrived_ns=arrival.arrived_ns, outputs=None, commitment=None, commitment_ok=False,
            signature_ok=False, disconnected=False, error=arrival.error, **base,
        )  # fmt: skip
    return Observation(
        arrived_ns=arrival.arrived_ns,
        outputs=res.outputs,
        commitment=res.commitment,
        commitment_ok=commitment(res.outputs) == res.commitment,
        signature_ok=verify_receipt(
            s.node_key_raw, res.signature, s.session_id, round_id, res.commitment
        ),
        disconnected=False,
        error=None,
        **base,
    )


ROUND_KINDS = tuple(k.value for k in RoundKind)


async def run_round(
    coord: Coordinator,
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
    """
    profile = coord.profiles.get(profile_name)
    if profile is None:
        raise RoundError(f"unknown profile {profile_name!r}")
    if kind not in ROUND_KINDS:
        raise RoundError(f"unknown round kind {kind!r}; expected one of {ROUND_KINDS}")
    if rule is None:
        rule = "all" if load is None else "explicit"
    async with coord.round_lock:
        return await _run_locked(
            coord, profile, rng or random.SystemRandom(), load, kind, rule, context
        )


async def _run_locked(
    coord: Coordinator,
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

    await _measure_rtts(sessions, timing)
    for s in sessions:
        timing[s.node_key].rtt_s = s.rtt_s
        timing[s.node_key].deadline_s = profile.deadline_s(s.rtt_s or 0.0)

    # Plan (pure) and persist before anything reaches a node.
    fps = {s.fingerprint_id for s in sessions}
    pool = {
        fp: await asyncio.to_thread(
            store.unspent_canaries, fp, profile.canaries_max * len(sessions) * 4
        )
        for fp in fps
    }
    plan = plan_round(
        round_id, [PlanNode(s.node_key, s.fingerprint_id) for s in sessions], pool, profile, rng
    )
    await asyncio.to_thread(store.record_plan, plan, time.time())
    await asyncio.to_thread(_warn_low_pool, store, profile, sessions)
    await asyncio.to_thread(
        coord.screening.flags.record_schedule,
        round_id, profile.name, kind, rule, schedule, context,
    )  # fmt: skip
    t_planned = time.monotonic()
    log.info(
        "round %s (%s) planned: %d of %d nodes loaded, %d skipped, B=%d",
        round_id, kind, len(plan.assignments), len(keys), len(plan.skipped), plan.batch_size,
    )  # fmt: skip

    # Dispatch and wait for acknowledgements.
    acks = await _dispatch(plan, profile, by_key, timing)
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
    await _release(round_id, ready, timing)
    t_released = time.monotonic()
    if results:
        await asyncio.wait(results.values(), timeout=profile.result_timeout_s)
    t_collected = time.monotonic()
    if coord.stopping:
        # The coordinator is shutting down and closed the sessions itself: no node is to
        # blame. Canaries stay spent (they were revealed); no verdict is recorded.
        log.warning("round %s aborted: coordinator shutting down", round_id)
        await asyncio.to_thread(store.finish_round, round_id, "aborted", {"reason": "shutdown"})
        return RoundReport(round_id, profile.name, "aborted", kind=kind, schedule=schedule)

    # Verify (pure) and record.
    outcomes: list[NodeOutcome] = []
    records: dict[str, NodeRecord] = {}
    for a in plan.assignments:
        s, t = by_key[a.node_key], timing[a.node_key]
        fut = results.get(a.node_key)
        if fut is None:
            gone = s.closed.is_set()
            outcomes.append(
                NodeOutcome(
                    a.node_key,
                    Verdict.DISCONNECTED if gone else Verdict.MISSING,
                    "session closed before release" if gone else "no ack before dispatch deadline",
                    None,
                    len(a.canary_ids),
                    0,
                )  # fmt: skip
            )
            records[a.node_key] = NodeRecord(t)
            continue
        obs = _observe(s, a, round_id, t, fut)
        outcome = verify(
            a, obs, max_new_tokens=plan.max_new_tokens, deadline_s=float(t.deadline_s or 0.0)
        )
        outcomes.append(outcome)
        arrival = fut.result() if fut.done() and fut.exception() is None else None
        res = arrival.result if arrival else None
        records[a.node_key] = NodeRecord(
            timing=t,
            session_id=s.session_id,
            outputs=[list(o) for o in res.outputs] if res else None,
            commitment=res.commitment if res else None,
            signature=res.signature if res else None,
            error=arrival.error if arrival else None,  # the node's own text, escaped
        )
    for node_key, reason in plan.skipped:
        verdict, why = await asyncio.to_thread(
            _classify_skip, store, profile, by_key[node_key].fingerprint_id, reason
        )
        outcomes.append(NodeOutcome(node_key, verdict, why, None, 0, 0))
        records[node_key] = NodeRecord(timing[node_key])
    t_verified = time.monotonic()

    starts = [t.release_start_ns for t in timing.values() if t.release_start_ns is not None]
    ends = [t.release_end_ns for t in timing.values() if t.release_end_ns is not None]
    elapsed = [o.elapsed_s for o in outcomes if o.elapsed_s is not None]
    phases = {
        "plan_s": t_planned - t0,
        "dispatch_s": t_dispatched - t_planned,
        "release_skew_s": (max(ends) - min(starts)) / 1e9 if starts else 0.0,
        "release_loop_s": t_released - t_dispatched,
        "compute_median_s": statistics.median(elapsed) if elapsed else 0.0,
        "collect_s": t_collected - t_released,
        "verify_s": t_verified - t_collected,
        "total_s": t_verified - t0,
    }
    await asyncio.to_thread(store.record_outcome, round_id, outcomes, records)
    await asyncio.to_thread(store.finish_round, round_id, "complete", phases)
    for s in sessions:
        s.forget_round(round_id)
    for o in outcomes:
        log.info("round %s node %s verdict=%s %s", round_id, o.node_key[:20], o.verdict, o.reason)
    flag_ids = await coord.screening.after_round(profile, plan, outcomes, records)
    report = RoundReport(
        round_id, profile.name, "complete", outcomes, phases, kind, schedule, flag_ids
    )
    observe_round(report)  # Prometheus metrics
    return report
