"""Verdicts (pure): what one node's result in one round means.

No crypto and no I/O here: the coordinator checks the commitment and the receipt
signature and passes the booleans in :class:`Observation`; times are its own monotonic
nanoseconds. docs/design.md, "A round", step 6.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from netcheck.records import Assignment, NodeOutcome, Verdict

__all__ = [
    "ABANDONED",
    "UNACKNOWLEDGED",
    "UNDELIVERED",
    "NodeOutcome",
    "Observation",
    "Verdict",
    "profile_mismatch",
    "verify",
]


@dataclass(frozen=True)
class Observation:
    """What the coordinator saw for one node in one round.

    ``released_ns``/``arrived_ns``: coordinator ``time.monotonic_ns()`` when the release
    was written and when the result arrived (``None`` = did not happen). ``outputs``:
    the result's token ids (``None`` = no result). ``commitment_ok``: the result's
    commitment equals ``protocol.jobs.commitment(outputs)``. ``signature_ok``: the
    receipt signature verifies under the node's key. ``disconnected``: the session
    closed before a result. ``error``: the node's own error report, if any.
    ``closed_ns``: when the coordinator saw the session close (same clock; None = not
    known or not closed). ``acked_ns``: when the node's acknowledgement of its job
    arrived (same clock; None = it did not acknowledge, or not known).
    ``job_written_ns``: when its job frame was handed to the connection (same clock;
    from then its head, which gives the frame's length, could reach the node, even if
    the rest of the write blocked; None = the job never reached the socket: the node
    was gone before dispatch or stalled behind an earlier write).
    """

    released_ns: int | None
    arrived_ns: int | None
    outputs: Sequence[Sequence[int]] | None
    commitment: bytes | None
    signature_ok: bool
    disconnected: bool
    error: str | None
    commitment_ok: bool
    closed_ns: int | None = None
    acked_ns: int | None = None
    job_written_ns: int | None = None

    def acknowledged(self) -> bool:
        """The node acknowledged its job (a release is written only after an ack)."""
        return self.acked_ns is not None or self.released_ns is not None

    def delivered(self) -> bool:
        """Its job reached the connection (an ack, hence a release, implies it)."""
        return self.job_written_ns is not None or self.acknowledged()


#: Reason of a node that acknowledged its job and then closed its session without a
#: result (its verdict is ``missing``, whenever the close came).
ABANDONED = "session closed after acknowledging its job, without a result"
#: Reason of a node whose job reached its connection and that closed its session (or was
#: aborted for not reading the rest) before acknowledging it (``missing`` too: it could
#: see its job arrive, like one that acknowledged it).
UNACKNOWLEDGED = "session closed after its job was delivered, before acknowledging it"
#: Reason of a node whose job never reached its connection (``disconnected``).
UNDELIVERED = "session closed before its job was delivered"


def profile_mismatch(node_key: str, reason: str) -> NodeOutcome:
    """Outcome of a node the planner skipped (``RoundPlan.skipped``)."""
    return NodeOutcome(node_key, Verdict.PROFILE_MISMATCH, reason, None, 0, 0)


def _positions(items: Sequence[int], limit: int = 20) -> str:
    shown = ", ".join(str(i) for i in items[:limit])
    return f"[{shown}{', ...' if len(items) > limit else ''}]"


def _malformed(a: Assignment, obs: Observation, max_new_tokens: int) -> str | None:
    outputs = obs.outputs
    assert outputs is not None
    b = len(a.prompts)
    if len(outputs) != b:
        return f"{len(outputs)} outputs, expected {b}"
    short = [i for i, o in enumerate(outputs) if len(o) != max_new_tokens]
    if short:
        return f"outputs at positions {_positions(short)} are not {max_new_tokens} tokens long"
    if obs.commitment is None or not obs.commitment_ok:
        return "commitment does not match the outputs"
    if not obs.signature_ok:
        return "receipt signature does not verify"
    if obs.released_ns is None:
        return "result arrived before release"
    if obs.arrived_ns is None:
        return "result without arrival time"
    if obs.arrived_ns < obs.released_ns:
        return "result arrived before release"
    return None


def _abandoned(obs: Observation, deadline_s: float) -> str:
    """Reason of a delivered job whose session closed without a result: when."""
    if not obs.acknowledged():
        return UNACKNOWLEDGED
    if obs.released_ns is None:
        return f"{ABANDONED} (closed before its release)"
    if obs.closed_ns is None:
        return f"{ABANDONED} (closed after its release)"
    closed_s = (obs.closed_ns - obs.released_ns) / 1e9
    when = "after" if closed_s > deadline_s else "before"
    return (f"{ABANDONED} (closed {closed_s:.3f} s after release, {when} the deadline "
            f"{deadline_s:.3f} s)")  # fmt: skip


def verify(
    assignment: Assignment, obs: Observation, *, max_new_tokens: int, deadline_s: float
) -> NodeOutcome:
    """Judge one node's result against its assignment.

    Checks, first failure wins: no result (``disconnected`` if the session closed
    before the node's job reached its connection; ``missing`` if it closed after
    that, whenever: before or after its acknowledgement, before or after the release,
    before or after the deadline, since a node that could leave a job it holds without
    a strike could leave exactly in the rounds that load it together with another
    identity on its card, docs/detection.md "What escapes"; ``missing`` too for no result by the
    timeout or the node's own error report); ``malformed`` (wrong number of outputs,
    an output not ``max_new_tokens`` long, commitment mismatch, bad receipt signature,
    no usable release/arrival times); ``wrong-answer`` (any canary output differs from
    its reference answer; the reason lists the positions); ``late`` (arrival minus
    release exceeds ``deadline_s`` seconds, which already includes 2 x RTT and slack);
    else
    ``pass``. A result that arrived before the session closed is judged normally.
    """
    key = assignment.node_key
    k = len(assignment.canary_ids)
    if obs.outputs is None:
        if obs.disconnected and not obs.delivered():
            return NodeOutcome(key, Verdict.DISCONNECTED, UNDELIVERED, None, 0, 0)
        if obs.disconnected:
            reason = _abandoned(obs, deadline_s)
        elif obs.error:
            reason = f"node reported error: {obs.error}"
        else:
            reason = "no result before timeout"
        return NodeOutcome(key, Verdict.MISSING, reason, None, 0, 0)
    elapsed: float | None = None
    if obs.released_ns is not None and obs.arrived_ns is not None:
        elapsed = (obs.arrived_ns - obs.released_ns) / 1e9
    problem = _malformed(assignment, obs, max_new_tokens)
    if problem is not None:
        return NodeOutcome(key, Verdict.MALFORMED, problem, elapsed, 0, 0)
    assert elapsed is not None
    wrong = [
        pos
        for pos, answer in zip(assignment.canary_positions, assignment.canary_answers, strict=True)
        if tuple(obs.outputs[pos]) != tuple(answer)
    ]
    matched = k - len(wrong)
    if wrong:
        reason = f"canary mismatch at positions {_positions(wrong)} ({matched}/{k} matched)"
        return NodeOutcome(key, Verdict.WRONG_ANSWER, reason, elapsed, k, matched)
    if elapsed > deadline_s:
        reason = f"{elapsed:.3f} s after release, deadline {deadline_s:.3f} s"
        return NodeOutcome(key, Verdict.LATE, reason, elapsed, k, matched)
    reason = f"{matched}/{k} canaries matched in {elapsed:.3f} s (deadline {deadline_s:.3f} s)"
    return NodeOutcome(key, Verdict.PASS, reason, elapsed, k, matched)
