"""Collect: what each node's result (or its absence) means once the round's results
are in: the observation of one arrival, every node's verdict and record, and a node's
timing entry in the round report."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from netcheck.analysis.verdicts import Observation, verify
from netcheck.coordinator.session import Arrival, NodeDisconnected, NodeSession
from netcheck.protocol.jobs import commitment, verify_receipt
from netcheck.records import Assignment, NodeOutcome, NodeRecord, NodeTiming, RoundPlan, Verdict


def observe(
    s: NodeSession, a: Assignment, round_id: str, t: NodeTiming, fut: asyncio.Future[Arrival] | None
) -> Observation:
    """What arrived from node ``s`` for assignment ``a`` (``fut``: its result future,
    None if it was never released), for :func:`~netcheck.analysis.verdicts.verify`;
    sets the arrival stamps on ``t``."""
    base: dict[str, Any] = {
        "released_ns": t.release_start_ns, "acked_ns": t.acked_ns,
        "job_written_ns": t.job_written_ns,
    }  # fmt: skip
    if fut is None or not fut.done():
        return Observation(
            arrived_ns=None, outputs=None, commitment=None, commitment_ok=False,
            signature_ok=False, disconnected=s.closed.is_set(), error=None,
            closed_ns=s.closed_ns, **base,
        )  # fmt: skip
    exc = fut.exception()
    if isinstance(exc, NodeDisconnected):
        return Observation(
            arrived_ns=None, outputs=None, commitment=None, commitment_ok=False,
            signature_ok=False, disconnected=True, error=None, closed_ns=s.closed_ns,
            **base,
        )  # fmt: skip
    arrival = fut.result()
    t.arrived_ns = arrival.arrived_ns
    t.processed_ns = arrival.processed_ns
    t.arrival_stamp = arrival.stamp_source
    res = arrival.result
    if res is None:
        return Observation(
            arrived_ns=arrival.arrived_ns, outputs=None, commitment=None, commitment_ok=False,
            signature_ok=False, disconnected=False, error=arrival.error, **base,
        )  # fmt: skip
    c_ok, s_ok = arrival.commitment_ok, arrival.signature_ok
    if c_ok is None or s_ok is None:  # not checked by the opener (cannot happen): check here
        c_ok = commitment(res.outputs) == res.commitment
        s_ok = verify_receipt(s.node_key_raw, res.signature, s.session_id, round_id, res.commitment)
    return Observation(
        arrived_ns=arrival.arrived_ns,
        outputs=res.outputs,
        commitment=res.commitment,
        commitment_ok=c_ok,
        signature_ok=s_ok,
        disconnected=False,
        error=None,
        **base,
    )


def unacknowledged(s: NodeSession, a: Assignment, round_id: str, t: NodeTiming) -> NodeOutcome:
    """The outcome of a node with no (timely) ack: ``missing`` if its session is still
    open ("no ack before dispatch deadline"); else as :func:`verify` judges a close
    without a result: ``missing`` if its job had reached the connection, ``disconnected``
    if not; with the abort reason, if the coordinator aborted it (e.g. its job write
    blocked)."""
    if not s.closed.is_set():
        return NodeOutcome(
            a.node_key, Verdict.MISSING, "no ack before dispatch deadline",
            None, len(a.canary_ids), 0,
        )  # fmt: skip
    outcome = verify(
        a, observe(s, a, round_id, t, None), max_new_tokens=0, deadline_s=float(t.deadline_s or 0.0)
    )
    why = outcome.reason
    if s.abort_reason and outcome.verdict is Verdict.DISCONNECTED:
        why = s.abort_reason  # aborted by the coordinator (e.g. its job write blocked)
    elif s.abort_reason:
        why = f"{outcome.reason} ({s.abort_reason})"
    return dataclasses.replace(outcome, reason=why, canaries_checked=len(a.canary_ids))


def received_record(
    s: NodeSession,
    t: NodeTiming,
    fut: asyncio.Future[Arrival],
    *,
    budget: dict[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> NodeRecord:
    """The record of a released node: its timing ``t``, and the result as received
    (outputs, signed receipt, or the node's own error text, already escaped) where
    ``fut`` holds one; ``budget`` and ``extra`` as :class:`~netcheck.records.NodeRecord`."""
    arrival = fut.result() if fut.done() and fut.exception() is None else None
    res = arrival.result if arrival else None
    return NodeRecord(
        timing=t,
        session_id=s.session_id,
        outputs=[list(o) for o in res.outputs] if res else None,
        commitment=res.commitment if res else None,
        signature=res.signature if res else None,
        error=arrival.error if arrival else None,
        budget=budget,
        extra=dict(extra or {}),
    )


def judge(
    plan: RoundPlan,
    by_key: Mapping[str, NodeSession],
    timing: Mapping[str, NodeTiming],
    results: Mapping[str, asyncio.Future[Arrival]],
    local_failures: Mapping[str, str],
    skipped: Mapping[str, tuple[Verdict, str]],
    first_release_ns: int | None,
) -> tuple[list[NodeOutcome], dict[str, NodeRecord], dict[str, str]]:
    """Every node's verdict and record after collection: each assignment verified
    (:func:`~netcheck.analysis.verdicts.verify`) against what arrived, the coordinator's
    own failures (``local_failures``) as ``coordinator-error``, and the nodes the plan
    skipped (``skipped``: key -> classified verdict and reason).

    Returns the outcomes, the records (timing, receipt, budget against
    ``first_release_ns``) and, per node whose fingerprint differs from the reference
    set, the differing fields (for its verdict notice).
    """
    outcomes: list[NodeOutcome] = []
    records: dict[str, NodeRecord] = {}
    for a in plan.assignments:
        s, t = by_key[a.node_key], timing[a.node_key]
        fut = results.get(a.node_key)
        if a.node_key in local_failures:
            why = local_failures[a.node_key]
            outcomes.append(
                NodeOutcome(a.node_key, Verdict.COORDINATOR_ERROR, why, None, len(a.canary_ids), 0)
            )
            records[a.node_key] = NodeRecord(t, budget=t.budget(first_release_ns))
            continue
        if fut is None:  # never acknowledged its job (or its ack came too late)
            outcomes.append(unacknowledged(s, a, plan.round_id, t))
            records[a.node_key] = NodeRecord(t, budget=t.budget(first_release_ns))
            continue
        obs = observe(s, a, plan.round_id, t, fut)
        outcome = verify(
            a, obs, max_new_tokens=plan.max_new_tokens, deadline_s=float(t.deadline_s or 0.0)
        )
        outcomes.append(outcome)
        records[a.node_key] = received_record(s, t, fut, budget=t.budget(first_release_ns))
    mismatch: dict[str, str] = {}  # node key -> the differing fingerprint fields
    for node_key, (verdict, why) in skipped.items():
        outcomes.append(NodeOutcome(node_key, verdict, why, None, 0, 0))
        if verdict is Verdict.PROFILE_MISMATCH and "differs from reference set" in why:
            mismatch[node_key] = why[why.index("differs from reference set") :]
        records[node_key] = NodeRecord(timing[node_key])
    return outcomes, records, mismatch


def report_timing(t: NodeTiming, first_release_ns: int | None) -> dict[str, Any]:
    """A node's entry in the round report: raw stamps plus its timing budget."""
    raw = {k: getattr(t, k) for k in ("release_start_ns", "arrived_ns", "processed_ns")}
    return {**raw, **t.budget(first_release_ns)}
