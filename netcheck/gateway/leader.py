"""The round leader's side of a cluster round (docs/gateways.md): prepare, plan and
persist, announce the release instant, close the round and run detection over every
node. Only the gateway holding the leader lock runs it; :func:`take_over` closes what a
lost leader left open.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from netcheck.config import Profile
from netcheck.coordinator.late_checks import after_round_checks, refuse_while_checks_held
from netcheck.coordinator.planner import PlanNode, plan_round
from netcheck.coordinator.pool import classify_skip
from netcheck.coordinator.rounds import ROUND_KINDS, LoadSpec, RoundReport, new_round_id
from netcheck.errors import RoundError, StorageError
from netcheck.records import NodeOutcome, NodeRecord, NodeTiming, Verdict
from netcheck.web.metrics import observe_round
from netcheck.workloads import get_workload
from netcheck.workloads.reservoir import decoy_target

if TYPE_CHECKING:
    from netcheck.gateway.service import GatewayBase as Gateway

log = logging.getLogger("netcheck.gateway")


#: A gateway whose presence lock is missing this long (seconds, while the leader's own
#: control connection is up) counts as lost; shorter gaps are reconnects, e.g. while
#: PostgreSQL restarts (the control connection's backoff is at most 5 s).
LOST_AFTER_S = 10.0


async def _all_answered(
    gw: Gateway,
    round_id: str,
    statuses: set[str],
    among: set[str] | None,
    missing_since: dict[str, float] | None = None,
) -> list[dict[str, Any]] | None:
    """The round's gateway rows once every live gateway (of ``among``, when given) has a
    row in one of ``statuses`` (or an excluded row); None while some are pending.

    With ``among``, a gateway of it counts as gone (not waited for) only after its
    presence lock has been missing for :data:`LOST_AFTER_S` (tracked in
    ``missing_since``) while this gateway's own control connection was up."""
    rows = await asyncio.to_thread(gw.cluster.round_gateway_rows, round_id)
    live = set(await asyncio.to_thread(gw.cluster.live_gateways))
    done = {r["gateway_id"] for r in rows if r["status"] in statuses | {"excluded"}}
    if among is None:
        return rows if live <= done else None
    now = time.monotonic()
    track = missing_since if missing_since is not None else {}
    for g in among:
        if g in live or not gw.control.connected.is_set():
            track.pop(g, None)
        else:
            track.setdefault(g, now)
    gone = {g for g, t in track.items() if now - t >= LOST_AFTER_S}
    return rows if among - gone <= done else None


async def _still_leader(gw: Gateway) -> bool:
    """True if this gateway leads, or wins the lock back within ``join_timeout_s`` (its
    control connection broke, e.g. the database restarted, and reconnected). If another
    gateway won it instead, that one aborts the round (:func:`take_over`)."""

    async def check() -> bool | None:
        return True if gw.control.is_leader else None

    return bool(await gw.wait_for(check, gw.gconfig.join_timeout_s))


async def run_cluster_round(
    gw: Gateway,
    profile_name: str,
    *,
    load: LoadSpec | None = None,
    kind: str = "full",
    rule: str | None = None,
    context: Mapping[str, Any] | None = None,
    rng: random.Random | None = None,
) -> RoundReport:
    """Run one round over the nodes of every live gateway (this gateway must lead).

    Arguments as :func:`netcheck.coordinator.rounds.run_round`.

    Raises:
        RoundError: not the leader, unknown profile or kind, no node joined, or
            leadership lost during the round (the new leader closes it).
        StorageError: the plan could not be persisted, or the after-round checks of an
            earlier round are held in memory only (no new round until they are stored or
            run: :func:`~netcheck.coordinator.late_checks.refuse_while_checks_held`).
    """
    profile = gw.profiles.get(profile_name)
    if profile is None:
        raise RoundError(f"unknown profile {profile_name!r}")
    if kind not in ROUND_KINDS:
        raise RoundError(f"unknown round kind {kind!r}; expected one of {ROUND_KINDS}")
    if not gw.control.is_leader:
        raise RoundError(
            f"gateway {gw.gateway_id} is not the round leader: ask the gateway whose log says "
            "'round leader' (metric netcheck_gateway_leader = 1)"
        )
    rule = rule or ("all" if load is None else "explicit")
    rng = rng or random.SystemRandom()
    cluster = gw.cluster
    async with gw.round_lock:
        await refuse_while_checks_held(gw)  # fail-safe: no round while checks are held
        t0 = time.monotonic()
        est = await gw.measure_clock()
        round_id = new_round_id()
        await gw.db(
            cluster.create_round, round_id, gw.gateway_id, profile.name, est.offset_s,
            est.uncertainty_s,
        )  # fmt: skip
        try:
            return await _lead(gw, profile, round_id, t0, load, kind, rule, context, rng)
        except BaseException as exc:  # leave no round open for the others to wait on
            with contextlib.suppress(StorageError):
                await gw.db(
                    cluster.abort_round, round_id, f"leader error: {exc}"[:500],
                    {"reason": str(exc)[:500]},
                )  # fmt: skip
            raise


async def _lead(
    gw: Gateway,
    profile: Profile,
    round_id: str,
    t0: float,
    load: LoadSpec | None,
    kind: str,
    rule: str,
    context: Mapping[str, Any] | None,
    rng: random.Random,
) -> RoundReport:
    cfg = gw.gconfig
    cluster, store = gw.cluster, gw.store
    gw_rows = await gw.wait_for(
        lambda: _all_answered(gw, round_id, {"joined"}, None), cfg.join_timeout_s
    )
    if gw_rows is None:  # some live gateway did not answer: go with those that did
        gw_rows = await gw.db(cluster.round_gateway_rows, round_id)
    joined = {r["gateway_id"] for r in gw_rows if r["status"] == "joined"}
    for r in gw_rows:
        if r["status"] == "excluded":
            log.warning("round %s: gateway %s sits out: %s", round_id, r["gateway_id"],
                        r["reason"])  # fmt: skip
    members = [
        m for m in await gw.db(cluster.round_member_rows, round_id)
        if m["gateway_id"] in joined
    ]  # fmt: skip
    if not members:
        raise RoundError(f"no node connected with profile {profile.name!r} on any gateway")
    keys = sorted(m["node_key"] for m in members)
    if load is None:
        chosen = set(keys)
    elif callable(load):
        chosen = set(load(round_id, keys))
    else:
        chosen = set(load)
    schedule = {k: k in chosen for k in keys}
    loaded = [m for m in members if schedule[m["node_key"]]]
    gateway_of = {m["node_key"]: m["gateway_id"] for m in members}
    fp_of = {m["node_key"]: m["fingerprint_id"] for m in members}

    # Plan (pure) and persist; canaries are spent in the same transaction.
    pool = {
        fp: await gw.db(store.unspent_canaries, fp, profile.canaries_max * len(loaded) * 4)
        for fp in {m["fingerprint_id"] for m in loaded}
    }
    workload = get_workload(profile)
    plan = await asyncio.to_thread(  # pure and CPU-bound: keep the event loop free
        plan_round, round_id, [PlanNode(m["node_key"], m["fingerprint_id"]) for m in loaded],
        pool, profile, rng, gw.decoys.source(workload),
    )  # fmt: skip
    gw.decoys.top_up(workload, decoy_target(profile.batch_size * len(loaded)))  # next round's
    await gw.db(store.record_plan, plan, time.time())
    await gw.db(
        gw.screening.flags.record_schedule, round_id, profile.name, kind, rule, schedule,
        {**(context or {}), "gateways": sorted(joined)},
    )  # fmt: skip
    if not await gw.db(cluster.set_round_state, round_id, "planned", expect=["preparing"]):
        raise RoundError(f"round {round_id} was aborted by another leader before planning")
    t_planned = time.monotonic()
    log.info("round %s (%s) planned over %d gateway(s): %d of %d nodes loaded",
             round_id, kind, len(joined), len(plan.assignments), len(keys))  # fmt: skip

    # Wait for every gateway with a job to dispatch, then announce the instant.
    serving = {gateway_of[a.node_key] for a in plan.assignments}
    missing: dict[str, float] = {}
    await gw.wait_for(
        lambda: _all_answered(gw, round_id, {"ready", "reported"}, serving, missing),
        profile.dispatch_timeout_s + 10.0,
    )
    t_ready = time.monotonic()
    release_at_ns = await gw.db(cluster.db_now_ns) + int(cfg.release_margin_s * 1e9)
    if not await _still_leader(gw):
        raise RoundError(f"round {round_id}: leadership lost before release")
    released = await gw.db(
        cluster.set_round_state, round_id, "released", expect=["planned"],
        release_at_ns=release_at_ns,
    )  # fmt: skip
    if not released:
        raise RoundError(f"round {round_id} was aborted by another leader before release")

    # Wait for the reports; a gateway that died or never reports leaves its members
    # `disconnected` (nobody else is blamed).
    rows = await gw.wait_for(
        lambda: _all_answered(gw, round_id, {"reported"}, serving, missing),
        cfg.release_margin_s + profile.result_timeout_s + cfg.close_grace_s + 30.0,
    )
    t_reported = time.monotonic()
    if not await _still_leader(gw):
        raise RoundError(f"round {round_id}: leadership lost before close")
    if rows is None:
        rows = await gw.db(cluster.round_gateway_rows, round_id)
    return await _close(
        gw, profile.name, plan, schedule, kind, gateway_of, fp_of, rows,
        {"plan_s": t_planned - t0, "dispatch_s": t_ready - t_planned,
         "collect_s": t_reported - t_ready},
    )  # fmt: skip


async def _close(
    gw: Gateway,
    profile_name: str,
    plan: Any,
    schedule: dict[str, bool],
    kind: str,
    gateway_of: dict[str, str],
    fp_of: dict[str, str],
    gw_rows: list[dict[str, Any]],
    timings: dict[str, float],
) -> RoundReport:
    cluster, store = gw.cluster, gw.store
    profile = gw.profiles[profile_name]
    round_id = plan.round_id
    t0 = time.monotonic()
    reported = {r["gateway_id"] for r in gw_rows if r["status"] == "reported"}
    live = set(await gw.db(cluster.live_gateways))
    recorded = {r["node_key"] for r in await gw.db(store.round_verdicts, round_id)}
    extra: list[NodeOutcome] = []
    for a in plan.assignments:
        g = gateway_of[a.node_key]
        if a.node_key in recorded:
            continue
        why = (f"gateway {g} lost mid-round" if g not in live
               else f"gateway {g} did not report in time")  # fmt: skip
        extra.append(NodeOutcome(a.node_key, Verdict.DISCONNECTED, why, None,
                                 len(a.canary_ids), 0))  # fmt: skip
    for node_key, reason in plan.skipped:
        verdict, why = await gw.db(classify_skip, store, profile, fp_of[node_key], reason)
        extra.append(NodeOutcome(node_key, verdict, why, None, 0, 0))
    if extra:
        await gw.retry_write(
            f"record outcome {round_id}",
            lambda: store.record_outcome(
                round_id,
                extra,
                {o.node_key: NodeRecord(extra={"gateway": gateway_of[o.node_key]}) for o in extra},
            ),
        )
    lost = sorted({gateway_of[o.node_key] for o in extra if o.verdict == Verdict.DISCONNECTED})
    firsts = [r["release_first_ns"] for r in gw_rows if r["release_first_ns"] is not None]
    lasts = [r["release_last_ns"] for r in gw_rows if r["release_last_ns"] is not None]
    wf = [r["release_first_wall_ns"] for r in gw_rows if r["release_first_wall_ns"] is not None]
    wl = [r["release_last_wall_ns"] for r in gw_rows if r["release_last_wall_ns"] is not None]
    verdict_rows = await gw.db(store.round_verdicts, round_id)
    outcomes = [
        NodeOutcome(v["node_key"], Verdict(v["verdict"]), v["reason"], v["elapsed_s"],
                    v["canaries_checked"], v["canaries_matched"])
        for v in verdict_rows
    ]  # fmt: skip
    elapsed = sorted(o.elapsed_s for o in outcomes if o.elapsed_s is not None)
    phases: dict[str, Any] = {
        **timings,
        "release_skew_s": (max(lasts) - min(firsts)) / 1e9 if firsts else 0.0,
        "release_skew_wall_s": (max(wl) - min(wf)) / 1e9 if wf else 0.0,
        # The skew's two parts: when the gateways started writing (clock offsets and
        # wake-up jitter) and the longest one gateway's loop took (n_g x per-frame cost).
        "release_start_spread_s": (max(wf) - min(wf)) / 1e9 if wf else 0.0,
        "release_loop_max_s": _gw_phase(gw_rows, "release_loop_s", max),
        # ... and what set the start: the latest first write after the instant, the
        # least margin left after sealing (participant.ReleaseTimes).
        "release_late_max_s": _gw_phase(gw_rows, "release_late_s", max),
        "release_ready_lead_min_s": _gw_phase(gw_rows, "release_ready_lead_s", min),
        "compute_median_s": elapsed[len(elapsed) // 2] if elapsed else 0.0,
        # Counts, not seconds: nested, so that views of the phases in seconds skip them.
        "cluster": {"gateways": len(gw_rows), "reported": len(reported), "lost": lost},
        "verify_s": time.monotonic() - t0,
    }
    phases["total_s"] = sum(
        v for k, v in phases.items() if k in ("plan_s", "dispatch_s", "collect_s", "verify_s")
    )
    closed = await gw.retry_write(
        f"close round {round_id}", lambda: cluster.close_round(round_id, phases)
    )
    if not closed:
        raise RoundError(f"round {round_id} was aborted by another leader; not closed here")
    results = await gw.db(cluster.round_results, round_id)
    records = {k: node_record(r) for k, r in results.items()}
    # The coordinator's rules (docs/spool.md): earlier rounds' checks first; checks the
    # database refuses are deferred to the spool (else held, and no round starts).
    flag_ids = await after_round_checks(gw, profile, plan, outcomes, records)
    report = RoundReport(
        round_id, profile_name, "complete", outcomes, phases, kind, schedule, flag_ids
    )
    observe_round(report)
    return report


def node_record(row: Mapping[str, Any]) -> NodeRecord:
    """A stored ``results`` row back as the :class:`~netcheck.records.NodeRecord` the
    detection checks take (timing on the cluster clock; hex fields as bytes)."""
    extra = dict(row.get("extra") or {})
    fields = {f.name for f in dataclasses.fields(NodeTiming)}
    timing = NodeTiming(**{k: v for k, v in extra.items() if k in fields})
    timing.release_start_ns = row.get("released_ns")
    timing.arrived_ns = row.get("arrived_ns")
    timing.rtt_s = row.get("rtt_s")

    def raw(key: str) -> bytes | None:
        v = row.get(key)
        return bytes.fromhex(v) if v else None

    return NodeRecord(
        timing=timing, session_id=raw("session_id"), outputs=row.get("outputs"),
        commitment=raw("commitment"), signature=raw("signature"), error=row.get("error"),
    )  # fmt: skip


async def take_over(gw: Gateway) -> None:
    """On winning leadership: close every round a lost leader left open, honestly.

    A round whose leader is gone cannot be released or closed by it; it is marked
    ``aborted`` (reason ``leader lost``). Verdicts gateways already recorded stay; no
    verdict is added (unique per round and node), and spent canaries stay spent.
    """
    try:
        for r in await gw.db(gw.cluster.open_rounds):
            if r["leader_id"] == gw.gateway_id and gw.round_lock.locked():
                continue  # our own round in flight
            ok = await gw.db(
                gw.cluster.abort_round, r["round_id"], "leader lost",
                {"reason": f"leader {r['leader_id']} lost", "taken_over_by": gw.gateway_id},
            )  # fmt: skip
            if ok:
                log.warning("round %s aborted: its leader %s was lost", r["round_id"],
                            r["leader_id"])  # fmt: skip
    except StorageError as exc:
        log.error("gateway %s: cannot close rounds of the lost leader: %s", gw.gateway_id, exc)


def _gw_phase(rows: list[dict[str, Any]], key: str, pick: Callable[..., float]) -> float:
    """``pick`` (max or min) of one phase over the gateways' reports (0.0 if none)."""
    vals = [float(v) for r in rows if (v := (r["phases"] or {}).get(key)) is not None]
    return pick(vals) if vals else 0.0
