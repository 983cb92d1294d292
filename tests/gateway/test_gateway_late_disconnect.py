"""A gateway judges its members on the cluster clock (participant._verify): the time a
session was seen closed must be moved to that clock too, or a close after the deadline
(monotonic ns against a release in database Unix ns) always looked like one before it
(tests/coordinator/test_late_disconnect.py is the single-coordinator case). Since
session 12 both are ``missing`` (the member had acknowledged its job); the reason still
says on which side of the deadline the close came. A member that left after its ack but
before its release is ``missing`` too, and so is one that left after its job was
written to it in full, before acknowledging it; one whose job write never completed is
``disconnected`` (tests/coordinator/test_leave_after_ack.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from netcheck.coordinator.session import NodeDisconnected
from netcheck.gateway.clock import ClockEstimate
from netcheck.gateway.participant import ClusterClock, _verify
from netcheck.records import Assignment, NodeTiming, RoundPlan

RELEASE_NS = 5_000_000_000  # this gateway's monotonic clock
ACK_NS = 4_000_000_000
WRITTEN_NS = 3_900_000_000
DEADLINE_S = 2.0


@pytest.mark.parametrize(
    ("closed_after_s", "released", "acked", "written", "verdict", "said"),
    [(1.0, True, True, True, "missing", "before the deadline"),
     (3.0, True, True, True, "missing", "after the deadline"),
     (-0.5, False, True, True, "missing", "before its release"),
     (-0.5, False, False, True, "missing", "delivered, before acknowledging it"),
     (-0.5, False, False, False, "disconnected", "before its job was delivered")],
)  # fmt: skip
async def test_a_member_leaving_after_its_ack_is_missing_on_the_cluster_clock(
    closed_after_s: float, released: bool, acked: bool, written: bool, verdict: str, said: str
) -> None:
    key = "ed25519:n1"
    assignment = Assignment(
        node_key=key, prompts=("p0",), canary_positions=(0,), canary_ids=("c0",),
        canary_answers=((1, 2),), job_key=bytes(32), job_nonce=bytes(12),
    )  # fmt: skip
    plan = RoundPlan("r1", "p", 1, 2, (assignment,), ())
    closed = asyncio.Event()
    closed.set()
    session = SimpleNamespace(
        closed=closed, closed_ns=RELEASE_NS + int(closed_after_s * 1e9), session_id=bytes(16),
        abort_reason=None,
    )  # fmt: skip
    results: dict[str, asyncio.Future] = {}  # a result is awaited only from acked nodes
    if acked:
        results[key] = asyncio.get_running_loop().create_future()
        results[key].set_exception(NodeDisconnected(key))
    timing = NodeTiming(
        deadline_s=DEADLINE_S, release_start_ns=RELEASE_NS if released else None,
        acked_ns=ACK_NS if acked else None, job_written_ns=WRITTEN_NS if written else None,
    )  # fmt: skip
    clock = ClusterClock(delta_ns=1_764_000_000 * 10**9)  # database Unix ns
    outcomes, records = _verify(plan, {key: session}, {key: timing}, results, clock,  # type: ignore[dict-item]
                          ClockEstimate(0.0, 0.0), {})  # fmt: skip
    (outcome,) = outcomes
    assert str(outcome.verdict) == verdict, outcome.reason
    assert said in outcome.reason, outcome.reason
    # the stored stamp is on the cluster clock, like the ack stamp (_NS_FIELDS)
    stored = records[key].timing
    assert stored is not None
    assert stored.job_written_ns == (clock.to_cluster(WRITTEN_NS) if written else None)
