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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from netcheck.analysis.verdicts import NodeOutcome, Observation, Verdict, verify
from netcheck.config import Profile
from netcheck.coordinator.planner import Assignment, PlanNode, RoundPlan, plan_round
from netcheck.coordinator.session import Arrival, NodeDisconnected, NodeSession
from netcheck.errors import LocalProtocolError, RoundError
from netcheck.protocol.jobs import commitment, seal_job, verify_receipt
from netcheck.protocol.messages import Job, Release
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


@dataclass
class NodeTiming:
    """Raw timestamps for one node in one round (``time.monotonic_ns`` values)."""

    rtt_s: float | None = None
    deadline_s: float | None = None
    job_sent_ns: int | None = None
    acked_ns: int | None = None
    release_start_ns: int | None = None
    release_end_ns: int | None = None
    arrived_ns: int | None = None
    # Relay test evidence (docs/detection.md "Relay test"), raw: every echo and every
    # correct probe round trip (seconds), the fastest probe, unanswered and wrong probes.
    echo_samples_s: list[float] = field(default_factory=list)
    probe_samples_s: list[float] = field(default_factory=list)
    probe_rtt_s: float | None = None
    probe_missed: int = 0
    probe_wrong: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, list) else v for k, v in self.__dict__.items()}


@dataclass
class RoundReport:
    """What a round produced: verdicts per node and the phase timings (seconds)."""

    round_id: str
    profile: str
    status: str
    outcomes: list[NodeOutcome] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    kind: str = "full"
    schedule: dict[str, bool] = field(default_factory=dict)
    flags: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "round_id": self.round_id,
            "profile": self.profile,
            "status": self.status,
            "kind": self.kind,
            "schedule": self.schedule,
            "flags": self.flags,
            "phases": self.phases,
            "verdicts": [
                {
                    "node_key": o.node_key,
                    "verdict": str(o.verdict),
                    "reason": o.reason,
                    "elapsed_s": o.elapsed_s,
                    "canaries_checked": o.canaries_checked,
                    "canaries_matched": o.canaries_matched,
                }
                for o in self.outcomes
            ],
        }


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
    plan: RoundPlan,
    profile: Profile,
    by_key: dict[str, NodeSession],
    timing: dict[str, NodeTiming],
    local_failures: dict[str, str],
) -> dict[str, asyncio.Future[int]]:
    """Send every job (bounded per node); returns the ack futures. A node the
    coordinator itself failed to serve is put in ``local_failures`` (key -> reason)."""
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
            # The bound aborts that node's connection (it is then `disconnected`); it
            # never cancels the write, which would poison the session (style.md rule 16).
            await s.send(job, write_timeout_s=profile.dispatch_timeout_s)
        except ConnectionError:
            if s.abort_reason:
                log.warning(
                    "round %s: node %s not reading (job send blocked): %s",
                    plan.round_id, s.label, s.abort_reason,
                )  # fmt: skip
            else:
                log.warning("round %s: node %s gone during dispatch", plan.round_id, s.label)
        except LocalProtocolError as exc:  # our own failure (e.g. counter exhausted)
            local_failures[a.node_key] = f"coordinator could not send the job: {exc}"
            log.error("round %s: node %s: %s", plan.round_id, s.label, exc)

    await asyncio.gather(*(one(a) for a in plan.assignments))
    return acks


async def _release(
    round_id: str,
    ready: Sequence[tuple[NodeSession, Assignment]],
    timing: dict[str, NodeTiming],
    write_timeout_s: float,
    local_failures: dict[str, str],
) -> None:
    """Write every ready node's ``release`` frame in one tight loop.

    Frames are sealed ahead while holding every session's send lock, so the loop does
    nothing but socket writes and clock reads (architecture.md, "Release").
    """
    sessions = [s for s, _ in ready]
    for s in sessions:
        await s.send_lock.acquire()
    try:
        frames: list[bytes | None] = []
        for s, a in ready:
            try:
                frames.append(s.transport.seal(Release(round_id=round_id, job_key=a.job_key)))
            except LocalProtocolError as exc:  # our failure (counter exhausted), not the node's
                local_failures[s.node_key] = f"coordinator could not send the release: {exc}"
                log.error("round %s: node %s: %s", round_id, s.label, exc)
                frames.append(None)
        for (s, _), frame in zip(ready, frames, strict=True):
            if frame is None:
                continue
            t = timing[s.node_key]
            t.release_start_ns = time.monotonic_ns()
            try:
                # Bounded like dispatch: a node that stops reading is aborted, not waited for.
                await s.write_bounded(frame, write_timeout_s, "release")
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


ROUND_KINDS = ("full", "screening", "confirmation")


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
    local_failures: dict[str, str] = {}  # the coordinator's own failures: blame no node
    acks = await _dispatch(plan, profile, by_key, timing, local_failures)
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
    records: dict[str, dict[str, Any]] = {}
    for a in plan.assignments:
        s, t = by_key[a.node_key], timing[a.node_key]
        fut = results.get(a.node_key)
        if a.node_key in local_failures:
            why = local_failures[a.node_key]
            outcomes.append(
                NodeOutcome(a.node_key, Verdict.COORDINATOR_ERROR, why, None, len(a.canary_ids), 0)
            )
            records[a.node_key] = {"timing": t.as_dict()}
            continue
        if fut is None:
            gone = s.closed.is_set()
            if gone:
                why = s.abort_reason or "session closed before release"
            else:
                why = "no ack before dispatch deadline"
            outcomes.append(
                NodeOutcome(
                    a.node_key,
                    Verdict.DISCONNECTED if gone else Verdict.MISSING,
                    why,
                    None,
                    len(a.canary_ids),
                    0,
                )  # fmt: skip
            )
            records[a.node_key] = {"timing": t.as_dict()}
            continue
        obs = _observe(s, a, round_id, t, fut)
        outcome = verify(
            a, obs, max_new_tokens=plan.max_new_tokens, deadline_s=float(t.deadline_s or 0.0)
        )
        outcomes.append(outcome)
        arrival = fut.result() if fut.done() and fut.exception() is None else None
        res = arrival.result if arrival else None
        records[a.node_key] = {
            "timing": t.as_dict(),
            "session_id": s.session_id.hex(),
            "outputs": [list(o) for o in res.outputs] if res else None,
            "commitment": res.commitment.hex() if res else None,
            "signature": res.signature.hex() if res else None,
            "error": arrival.error if arrival else None,  # the node's own text, escaped
        }
    for node_key, reason in plan.skipped:
        verdict, why = await asyncio.to_thread(
            _classify_skip, store, profile, by_key[node_key].fingerprint_id, reason
        )
        outcomes.append(NodeOutcome(node_key, verdict, why, None, 0, 0))
        records[node_key] = {"timing": timing[node_key].as_dict()}
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
