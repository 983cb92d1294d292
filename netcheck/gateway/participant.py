"""What every gateway (the leader included) does in a cluster round (docs/gateways.md):
clock check and join, dispatch, release at the scheduled instant, verify and record its
own nodes' outcomes once, report.

Stamps: the session code stamps on this gateway's monotonic clock; before verification
every stamp is moved to the *cluster clock* (database time, Unix ns) with this gateway's
wall/monotonic anchor and measured offset, so stored stamps of nodes on different
gateways are comparable. Elapsed times are differences of two stamps of one gateway and
do not change.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import struct
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from netcheck.analysis.verdicts import verify
from netcheck.coordinator.collect import observe, received_record, unacknowledged
from netcheck.coordinator.dispatch import dispatch
from netcheck.coordinator.rounds import _measure_rtts
from netcheck.coordinator.session import Arrival, NodeSession
from netcheck.errors import NetcheckError
from netcheck.gateway.clock import ClockEstimate, out_of_bounds, relative_to
from netcheck.protocol.messages import Release
from netcheck.records import Assignment, NodeOutcome, NodeRecord, NodeTiming, RoundPlan, Verdict

if TYPE_CHECKING:
    from netcheck.gateway.service import GatewayBase as Gateway

log = logging.getLogger("netcheck.gateway")

#: Until this long before the release instant the gateway waits on the event loop
#: (whose timers have ~1 ms resolution); then it sleeps in ``nanosleep`` (timer slack
#: ~50 µs) to SPIN_NS before the instant and spins the rest. Spinning for milliseconds,
#: as before, made K gateways on fewer than K cores take the CPU from each other right
#: before the instant, so some started late.
COARSE_NS = 5_000_000
SPIN_NS = 100_000


async def sleep_until(target_ns: int) -> None:
    """Return at ``target_ns`` (``time.monotonic_ns()`` clock), within ~0.1 ms where the
    process gets a CPU: event-loop sleep, then a short blocking sleep, then a spin of
    at most :data:`SPIN_NS`. Blocks the event loop for the last :data:`COARSE_NS` only."""
    while (left := target_ns - time.monotonic_ns()) > COARSE_NS:
        await asyncio.sleep((left - COARSE_NS) / 1e9)
    if (left := target_ns - time.monotonic_ns()) > SPIN_NS:
        time.sleep((left - SPIN_NS) / 1e9)
    while time.monotonic_ns() < target_ns:
        pass


_NS_FIELDS = (
    "job_sent_ns", "job_written_ns", "acked_ns", "release_start_ns", "release_end_ns",
    "arrived_ns",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ClusterClock:
    """Maps this gateway's monotonic stamps to the cluster clock (database Unix ns)."""

    delta_ns: int  # cluster_ns = monotonic_ns + delta_ns

    @classmethod
    def anchor(cls, gw: Gateway, est: ClockEstimate) -> ClusterClock:
        mono0 = time.monotonic_ns()
        wall0 = gw.wall_ns()
        mono1 = time.monotonic_ns()
        return cls(wall0 - (mono0 + mono1) // 2 + round(est.offset_s * 1e9))

    def to_cluster(self, mono_ns: int | None) -> int | None:
        return None if mono_ns is None else mono_ns + self.delta_ns

    def to_monotonic(self, cluster_ns: int) -> int:
        return cluster_ns - self.delta_ns


def ws_frame(payload: bytes) -> bytes:
    """One unmasked, unfragmented binary websocket frame (RFC 6455 §5.2, server to
    client) carrying ``payload``: what aiohttp's writer produces for ``send_bytes``
    without compression."""
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", 0x82, n)
    elif n < 65536:
        header = struct.pack("!BBH", 0x82, 126, n)
    else:
        header = struct.pack("!BBQ", 0x82, 127, n)
    return header + payload


def _raw_transport(s: NodeSession) -> asyncio.WriteTransport | None:
    """The session's socket transport when its websocket writes uncompressed frames
    straight to it (aiohttp's server writer); else None (use ``send_bytes``)."""
    writer: Any = getattr(s.ws, "_writer", None)
    transport = getattr(writer, "transport", None)
    if not isinstance(transport, asyncio.WriteTransport) or writer.compress or writer.use_mask:
        return None
    return transport


@dataclasses.dataclass(frozen=True)
class ReleaseTimes:
    """When one gateway's release happened (monotonic ns; None without a ready node).

    ``ready_ns``: every frame sealed and framed; ``first_ns``/``last_ns``: the first
    write's start and the last write's end. Skew diagnostics: ``target - ready_ns`` is
    the margin left after sealing (negative: the gateway started late because of it),
    ``first_ns - target`` how late the timer woke it (docs/scaling.md)."""

    target_ns: int
    ready_ns: int
    first_ns: int | None
    last_ns: int | None


async def release_at(
    round_id: str,
    ready: Sequence[tuple[NodeSession, Assignment]],
    timing: dict[str, NodeTiming],
    target_mono_ns: int,
) -> ReleaseTimes:
    """Seal every ready node's release frame ahead, wait until ``target_mono_ns``
    (:func:`sleep_until`) and write them in one tight loop.

    The frames are sealed *and* wrapped as websocket frames ahead while every session's
    send lock is held, and the loop writes each to its socket transport without an
    ``await`` in between (one ``write`` per node, usually one ``send`` syscall), so no
    other task runs inside the loop; the garbage collector is off from the sealing to
    the loop's end (a collection in the loop would stall every write after it). A session
    whose transport is not reachable that way falls back to ``send_bytes``.
    """
    sessions = [s for s, _ in ready]
    for s in sessions:
        await s.send_lock.acquire()
    gc_was_enabled = gc.isenabled()
    try:
        plan = []
        for s, a in ready:
            if s.gone():  # the node ended its session after its ack (e.g. broke the protocol)
                log.warning("round %s: node %s gone before release", round_id, s.label)
                continue  # no release: it acked, then left: missing
            if not s.holds_job(round_id):  # it reported an error after its ack: missing
                log.warning("round %s: node %s gave up its job before release", round_id, s.label)
                continue  # sealing would raise and leave every member of this gateway out
            frame = s.seal(Release(round_id=round_id, job_key=a.job_key))
            plan.append((s, _raw_transport(s), frame))
        raw = [ws_frame(f) if t is not None else f for _, t, f in plan]
        ready_ns = time.monotonic_ns()
        gc.disable()
        await sleep_until(target_mono_ns)
        slow: list[tuple[NodeSession, bytes]] = []
        for (s, transport, frame), data in zip(plan, raw, strict=True):
            t = timing[s.node_key]
            if transport is None:
                slow.append((s, frame))
                continue
            t.release_start_ns = time.monotonic_ns()
            if transport.is_closing():
                log.warning("round %s: node %s gone at release", round_id, s.label)
            else:
                transport.write(data)
            t.release_end_ns = time.monotonic_ns()
        if gc_was_enabled:
            gc.enable()
        for s, frame in slow:
            t = timing[s.node_key]
            t.release_start_ns = time.monotonic_ns()
            try:
                await s.ws.send_bytes(frame)
            except ConnectionError:
                log.warning("round %s: node %s gone at release", round_id, s.label)
            t.release_end_ns = time.monotonic_ns()
    finally:
        if gc_was_enabled:
            gc.enable()
        for s in sessions:
            s.send_lock.release()
    starts = [x for s in sessions if (x := timing[s.node_key].release_start_ns) is not None]
    ends = [x for s in sessions if (x := timing[s.node_key].release_end_ns) is not None]
    return ReleaseTimes(
        target_mono_ns, ready_ns, min(starts, default=None), max(ends, default=None)
    )


async def _state(gw: Gateway, round_id: str, states: set[str]) -> dict[str, Any] | None:
    row = await asyncio.to_thread(gw.cluster.get_round, round_id)
    return row if row is not None and row["state"] in states else None


async def participate(gw: Gateway, round_id: str) -> None:
    """Take part in one round; never raises (a failure is logged and the round goes on
    without this gateway: the leader records its members ``disconnected``)."""
    pending: list[asyncio.Future[Any]] = []
    try:
        with gw.rtt.holding():  # no RTT sample is taken while our nodes run the round
            await _participate(gw, round_id, pending)
    except NetcheckError as exc:
        gw.stats.rounds["failed"] += 1
        log.error("gateway %s: round %s: %s", gw.gateway_id, round_id, exc)
    finally:
        for s in gw.sessions.values():
            s.forget_round(round_id)
        for fut in pending:  # a round left early: its waiters' outcomes are not needed
            if fut.done() and not fut.cancelled():
                fut.exception()
            else:
                fut.cancel()


async def _participate(gw: Gateway, round_id: str, pending: list[asyncio.Future[Any]]) -> None:
    row = await gw.db(gw.cluster.get_round, round_id)
    if row is None or row["state"] != "preparing":
        return
    profile = gw.profiles.get(row["profile"])
    cfg = gw.gconfig

    # 1. Clock: offset to the database, then to the leader; out of bounds -> sit out.
    est = await gw.measure_clock()
    leader = ClockEstimate(row["leader_offset_s"], row["leader_uncertainty_s"])
    to_leader = relative_to(est, leader)
    values: dict[str, Any] = {
        "offset_s": est.offset_s,
        "leader_offset_s": to_leader.offset_s,
        "uncertainty_s": to_leader.uncertainty_s,
    }
    reason = out_of_bounds(to_leader, cfg.max_clock_offset_s, cfg.max_clock_uncertainty_s)
    if profile is None:
        reason = f"profile {row['profile']!r} not configured on this gateway"
    if reason is not None:
        log.warning("gateway %s sits out round %s: %s", gw.gateway_id, round_id, reason)
        gw.stats.rounds["excluded"] += 1
        await gw.db(
            gw.cluster.join_round, round_id, gw.gateway_id, [],
            {**values, "status": "excluded", "reason": reason},
        )  # fmt: skip
        return
    assert profile is not None
    clock = ClusterClock.anchor(gw, est)

    # 2. Join with the sessions that are really ours, after measuring their RTTs.
    sessions = await gw.reconcile(gw.connected(profile.name))
    timing = {s.node_key: NodeTiming() for s in sessions}
    await _measure_rtts(gw.rtt, sessions, timing)
    for s in sessions:
        timing[s.node_key].rtt_s = s.rtt_s
        timing[s.node_key].deadline_s = profile.deadline_s(s.rtt_s or 0.0)
    members = [
        {"node_key": s.node_key, "session_id": s.session_id.hex(),
         "fingerprint_id": s.fingerprint_id, "rtt_s": s.rtt_s}
        for s in sessions if not s.closed.is_set()
    ]  # fmt: skip
    landed = await gw.db(
        gw.cluster.join_round, round_id, gw.gateway_id, members, {**values, "status": "joined"}
    )
    by_key = {s.node_key: s for s in sessions if s.node_key in landed}
    gw.stats.rounds["joined"] += 1

    # 3. Wait for the plan; dispatch our members' jobs; report ready.
    st = await gw.wait_for(
        lambda: _state(gw, round_id, {"planned", "released", "aborted", "closed"}),
        cfg.join_timeout_s + 60.0,
    )
    if st is None or st["state"] not in ("planned", "released"):
        log.warning("gateway %s: round %s not planned (%s); leaving it",
                    gw.gateway_id, round_id, "timeout" if st is None else st["state"])  # fmt: skip
        return
    t_planned = time.monotonic()
    plan = await gw.db(_my_plan, gw, round_id, set(by_key))
    local_failures: dict[str, str] = {}  # this gateway's own send failures: blame no node
    acks = await dispatch(plan, profile, by_key, timing, local_failures)
    pending.extend(acks.values())
    if acks:
        await asyncio.wait(acks.values(), timeout=profile.dispatch_timeout_s)
    ready: list[tuple[NodeSession, Assignment]] = []
    for a in plan.assignments:
        ack = acks.get(a.node_key)
        if ack is not None and ack.done() and ack.exception() is None:
            timing[a.node_key].acked_ns = ack.result()
            ready.append((by_key[a.node_key], a))
    results = {s.node_key: s.expect_result(round_id) for s, _ in ready}
    pending.extend(results.values())
    t_dispatched = time.monotonic()
    await gw.retry_write(
        "report ready",
        lambda: gw.cluster.update_round_gateway(round_id, gw.gateway_id, "ready",
                                                status="ready", ready=len(ready)),
    )  # fmt: skip

    # 4. Release at the leader's instant (cluster clock -> our monotonic clock).
    st = await gw.wait_for(
        lambda: _state(gw, round_id, {"released", "aborted", "closed"}),
        profile.dispatch_timeout_s + cfg.join_timeout_s + 30.0,
    )
    if st is None or st["state"] != "released":
        log.warning("gateway %s: round %s never released (%s); no verdicts from here",
                    gw.gateway_id, round_id, "timeout" if st is None else st["state"])  # fmt: skip
        return
    target = clock.to_monotonic(int(st["release_at_ns"]))
    seen_ns = time.monotonic_ns()
    late_ms = (seen_ns - target) / 1e6
    if late_ms > 0:
        log.warning("gateway %s: round %s release instant already %.1f ms past",
                    gw.gateway_id, round_id, late_ms)  # fmt: skip
    rel = await release_at(round_id, ready, timing, target)
    first, last = rel.first_ns, rel.last_ns
    wall_delta = clock.delta_ns - round(est.offset_s * 1e9)
    t_released = time.monotonic()
    if results:
        await asyncio.wait(results.values(), timeout=profile.result_timeout_s)
    t_collected = time.monotonic()
    if gw.stopping:
        log.warning("gateway %s: round %s: shutting down, no verdicts recorded",
                    gw.gateway_id, round_id)  # fmt: skip
        return

    # 5. Verify (pure) on cluster-clock stamps and record our members' outcomes once.
    outcomes, records = _verify(plan, by_key, timing, results, clock, est, local_failures)
    # Bounded retry, then this gateway's spool (docs/spool.md); report only once the
    # verdicts are in the database, so the leader's close sees them.
    how = await asyncio.to_thread(
        gw.recorder.end_round, round_id, outcomes, records, status=None,
        canary_ids=[c for a in plan.assignments for c in a.canary_ids],
        part=f"gateway-{gw.gateway_id}",
    )  # fmt: skip
    if how == "spooled":
        await gw.replayed(round_id)
    gw.stats.last_release_loop_s = (last - first) / 1e9 if first and last else 0.0
    gw.stats.rounds["reported"] += 1
    phases = {
        "dispatch_s": t_dispatched - t_planned,
        "release_wait_s": t_released - t_dispatched,
        "collect_s": t_collected - t_released,
        "verify_record_s": time.monotonic() - t_collected,
        "release_loop_s": ((last - first) / 1e9) if first is not None and last is not None else 0.0,
        # Where a late start comes from: the instant was learnt this long before it
        # (NOTIFY, wake-up, the state read), the frames were ready this long before it,
        # and the first write started this long after it.
        "release_notice_s": (target - seen_ns) / 1e9,
        "release_ready_lead_s": (target - rel.ready_ns) / 1e9,
        "release_late_s": (first - target) / 1e9 if first is not None else 0.0,
    }
    await gw.retry_write(
        "report outcome",
        lambda: gw.cluster.update_round_gateway(
            round_id, gw.gateway_id, "reported", status="reported", recorded=len(outcomes),
            release_first_ns=clock.to_cluster(first), release_last_ns=clock.to_cluster(last),
            release_first_wall_ns=None if first is None else first + wall_delta,
            release_last_wall_ns=None if last is None else last + wall_delta,
            phases=phases,
        ),
    )  # fmt: skip


def _my_plan(gw: Gateway, round_id: str, mine: set[str]) -> RoundPlan:
    """This gateway's part of the stored plan: its members' assignments."""
    rrow = gw.cluster.round_row(round_id)
    if rrow is None:
        raise NetcheckError(f"round {round_id} has no plan")
    rows = [r for r in gw.store.round_assignments(round_id) if r["node_key"] in mine]
    answers = gw.cluster.canary_answers(c for r in rows for c in r["canary_ids"])
    assignments = tuple(
        Assignment(
            node_key=r["node_key"],
            prompts=tuple(r["prompts"]),
            canary_positions=tuple(r["positions"]),
            canary_ids=tuple(r["canary_ids"]),
            canary_answers=tuple(answers[c] for c in r["canary_ids"]),
            job_key=bytes.fromhex(r["job_key"]),
            job_nonce=bytes.fromhex(r["job_nonce"]),
        )
        for r in rows
    )
    return RoundPlan(
        round_id, rrow["profile"], rrow["batch_size"], rrow["max_new_tokens"], assignments, ()
    )


def _verify(
    plan: RoundPlan,
    by_key: dict[str, NodeSession],
    timing: dict[str, NodeTiming],
    results: dict[str, asyncio.Future[Arrival]],
    clock: ClusterClock,
    est: ClockEstimate,
    local_failures: dict[str, str],
) -> tuple[list[NodeOutcome], dict[str, NodeRecord]]:
    outcomes: list[NodeOutcome] = []
    records: dict[str, NodeRecord] = {}
    offset = {"clock_offset_s": est.offset_s}
    for a in plan.assignments:
        s, t = by_key[a.node_key], timing[a.node_key]
        fut = results.get(a.node_key)
        if a.node_key in local_failures:  # the gateway could not send: not the node's fault
            outcomes.append(NodeOutcome(
                a.node_key, Verdict.COORDINATOR_ERROR, local_failures[a.node_key],
                None, len(a.canary_ids), 0,
            ))  # fmt: skip
            _to_cluster(t, clock)
            records[a.node_key] = NodeRecord(t, extra=dict(offset))
            continue
        if fut is None:  # never acknowledged its job (or its ack came too late)
            outcomes.append(unacknowledged(s, a, plan.round_id, t))  # before _to_cluster
            _to_cluster(t, clock)
            records[a.node_key] = NodeRecord(t, extra=dict(offset))
            continue
        obs = observe(s, a, plan.round_id, t, fut)  # sets t.arrived_ns (monotonic)
        _to_cluster(t, clock)
        obs = dataclasses.replace(
            obs, released_ns=t.release_start_ns, arrived_ns=clock.to_cluster(obs.arrived_ns),
            closed_ns=clock.to_cluster(obs.closed_ns), acked_ns=t.acked_ns,
            job_written_ns=t.job_written_ns,
        )  # fmt: skip
        outcome = verify(
            a, obs, max_new_tokens=plan.max_new_tokens, deadline_s=float(t.deadline_s or 0.0)
        )
        outcomes.append(outcome)
        records[a.node_key] = received_record(s, t, fut, extra=offset)
    return outcomes, records


def _to_cluster(t: NodeTiming, clock: ClusterClock) -> None:
    for name in _NS_FIELDS:
        setattr(t, name, clock.to_cluster(getattr(t, name)))
