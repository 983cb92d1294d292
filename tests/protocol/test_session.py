"""netcheck.protocol.session: the post-handshake session walks the state table."""

from __future__ import annotations

import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

from netcheck.errors import CloseCode, FrameError, LocalProtocolError, MessageError, ProtocolError
from netcheck.lab.channel import FrameChannel
from netcheck.protocol.messages import (
    Ack,
    Bye,
    Echo,
    EchoReply,
    Error,
    Job,
    Message,
    Probe,
    ProbeReply,
    Release,
    Result,
)
from netcheck.protocol.session import (
    EXCESS_REPLIES_PER_S,
    EXCESS_REPLY_BURST,
    JOB_TYPES,
    Session,
    close_code_for,
    close_reason,
)
from netcheck.protocol.states import TRANSITIONS, Role, State
from netcheck.protocol.transport import open_admitted

N, C = Role.NODE, Role.COORDINATOR


def job(round_id: str = "r1") -> Job:
    return Job(round_id, bytes(12), b"x" * 32, 4, 4, 1.0)


def result(round_id: str = "r1") -> Result:
    return Result(round_id, ((1, 2), (3, 4)), bytes(32), bytes(64))


def release(round_id: str = "r1") -> Release:
    return Release(round_id, bytes(32))


def walk_to(ch: FrameChannel, state: State, round_id: str = "r1") -> None:
    """Drive round ``round_id`` on both sides to ``state``."""
    steps: list[tuple[Role, Message]] = [(C, job(round_id)), (N, Ack(round_id)),
                                         (C, release(round_id))]  # fmt: skip
    order = [State.JOB_OFFERED, State.JOB_PENDING, State.RUNNING]
    for (sender, msg), reached in zip(steps, order, strict=True):
        if state is State.OPEN:
            return
        ch.send(sender, msg)
        ch.deliver(N if sender is C else C)
        if reached is state:
            return


def test_a_round_walks_the_table_on_both_sides() -> None:
    """job, ack, release, result take both sides through the same states, then OPEN."""
    ch = FrameChannel.open()
    seen = []
    steps: list[tuple[Role, Message]] = [(C, job()), (N, Ack("r1")), (C, release()),
                                         (N, result())]  # fmt: skip
    for sender, msg in steps:
        ch.send(sender, msg)
        (got,) = ch.deliver(N if sender is C else C)
        assert got == msg
        seen.append((ch.node.job_state("r1"), ch.coordinator.job_state("r1")))
    assert seen == [
        (State.JOB_OFFERED, State.JOB_OFFERED),
        (State.JOB_PENDING, State.JOB_PENDING),
        (State.RUNNING, State.RUNNING),
        (State.OPEN, State.OPEN),
    ]
    assert ch.node.jobs() == ch.coordinator.jobs() == {}


JOB_MESSAGES: dict[str, tuple[Role, Message]] = {
    "job": (C, job()),
    "ack": (N, Ack("r1")),
    "release": (C, release()),
    "result": (N, result()),
    "error": (N, Error("r1", "engine error")),
}


@pytest.mark.parametrize("state", [State.OPEN, State.JOB_OFFERED, State.JOB_PENDING,
                                   State.RUNNING])  # fmt: skip
@pytest.mark.parametrize("msg_type", sorted(JOB_TYPES))
def test_received_job_messages_follow_the_table(state: State, msg_type: str) -> None:
    """In every job state, a received job message is accepted exactly when the table
    has the transition, and lands in the table's state; otherwise UNEXPECTED_MESSAGE."""
    ch = FrameChannel.open()
    walk_to(ch, state)
    sender, msg = JOB_MESSAGES[msg_type]
    receiver = N if sender is C else C
    # seal with the sender's transport directly: the test plays a peer that breaks rules
    ch.put(receiver, ch.sessions[sender].transport.seal(msg))
    key = (receiver, state, msg_type)
    if key in TRANSITIONS:
        ch.deliver(receiver)
        assert ch.sessions[receiver].job_state("r1") is TRANSITIONS[key]
    else:
        with pytest.raises(MessageError) as err:
            ch.deliver(receiver)
        assert err.value.code is CloseCode.UNEXPECTED_MESSAGE
        assert state.name in err.value.reason and "'r1'" in err.value.reason


def test_result_before_release_closes_unexpected_and_stays_failed() -> None:
    """A result for an acknowledged but unreleased round is UNEXPECTED_MESSAGE, and the
    session refuses everything after it with the same code."""
    ch = FrameChannel.open()
    walk_to(ch, State.JOB_PENDING)
    ch.put(C, ch.node.transport.seal(result()))
    ch.put(C, ch.node.transport.seal(EchoReply(1)))
    with pytest.raises(MessageError) as err:
        ch.deliver(C)
    assert close_code_for(err.value) is CloseCode.UNEXPECTED_MESSAGE
    assert ch.coordinator.failed is err.value
    with pytest.raises(MessageError) as again:
        ch.deliver(C)
    assert again.value.code is CloseCode.UNEXPECTED_MESSAGE
    with pytest.raises(LocalProtocolError):
        ch.send(C, Echo(2))


def test_release_before_ack_is_a_local_error_that_changes_nothing() -> None:
    """Sending a release before the ack is our own bug: LocalProtocolError, no frame
    sealed, state unchanged."""
    ch = FrameChannel.open()
    walk_to(ch, State.JOB_OFFERED)
    sent = ch.coordinator.transport.statistics()["frames_sent"]
    with pytest.raises(LocalProtocolError, match="release"):
        ch.send(C, release())
    assert ch.coordinator.transport.statistics()["frames_sent"] == sent
    assert ch.coordinator.job_state("r1") is State.JOB_OFFERED
    assert ch.pending(N) == 0


def test_rounds_are_independent_and_session_messages_keep_job_states() -> None:
    """Two rounds in flight keep their own states; echo and probe traffic changes none."""
    ch = FrameChannel.open()
    walk_to(ch, State.RUNNING, "a")
    walk_to(ch, State.JOB_OFFERED, "b")
    ch.send(C, Echo(5))
    ch.send(C, Probe(6, bytes(32)))
    ch.deliver(N)
    ch.send(N, EchoReply(5))
    ch.send(N, ProbeReply(6, bytes(32)))
    ch.deliver(C)
    for side in (ch.node, ch.coordinator):
        assert side.jobs() == {"a": State.RUNNING, "b": State.JOB_OFFERED}


def test_error_ends_a_job_in_any_job_state() -> None:
    """error from the node returns a round to OPEN from each job state (§6.2)."""
    ch = FrameChannel.open()
    for i, state in enumerate((State.JOB_OFFERED, State.JOB_PENDING, State.RUNNING)):
        walk_to(ch, state, f"r{i}")
        ch.send(N, Error(f"r{i}", "engine error"))
        ch.deliver(C)
        assert ch.coordinator.job_state(f"r{i}") is State.OPEN
    assert ch.coordinator.jobs() == ch.node.jobs() == {}


def test_bye_closes_and_anything_after_it_is_unexpected() -> None:
    """After bye both sides are CLOSED; a later message is UNEXPECTED_MESSAGE."""
    ch = FrameChannel.open()
    walk_to(ch, State.RUNNING)
    ch.send(N, Bye("going"))
    ch.deliver(C)
    assert ch.node.state is ch.coordinator.state is State.CLOSED
    ch.put(C, ch.node.transport.seal(result()))
    with pytest.raises(MessageError) as err:
        ch.deliver(C)
    assert err.value.code is CloseCode.UNEXPECTED_MESSAGE and "after bye" in err.value.reason


def test_forgotten_round_makes_a_late_ack_unexpected() -> None:
    """A round the coordinator forgot (timed out) refuses the node's late ack."""
    ch = FrameChannel.open()
    walk_to(ch, State.JOB_OFFERED)
    ch.coordinator.forget("r1")
    ch.send(N, Ack("r1"))
    with pytest.raises(MessageError) as err:
        ch.deliver(C)
    assert err.value.code is CloseCode.UNEXPECTED_MESSAGE


def test_transport_failures_fail_the_session_with_their_code() -> None:
    """A tampered frame is DECRYPT_FAILED; a replayed one COUNTER_MISMATCH; both stick."""
    ch = FrameChannel.open()
    frame = bytearray(ch.send(C, Echo(1)))
    ch.take(N)
    frame[-1] ^= 1
    ch.put(N, bytes(frame))
    with pytest.raises(FrameError) as err:
        ch.deliver(N)
    assert close_code_for(err.value) is CloseCode.DECRYPT_FAILED
    assert ch.node.failed is not None
    other = FrameChannel.open()
    echo = other.send(C, Echo(1))
    other.deliver(N)
    other.put(N, echo)  # replay
    with pytest.raises(FrameError) as replay:
        other.deliver(N)
    assert replay.value.code is CloseCode.COUNTER_MISMATCH


def test_admitted_frames_open_in_another_process() -> None:
    """Admission (counter, key schedule) stays on the session; the opening runs in a
    worker process and gives the same message; key updates are admitted in order."""
    ch = FrameChannel.open(rekey_frames=2)
    msgs = [job(f"r{i}") for i in range(5)]
    frames = [ch.sessions[C].send(m) for m in msgs]  # frames 1 and 3 are key updates
    assert [f[0] for f in frames] == [1, 2, 1, 2, 1]
    admitted = [ch.node.admit(f) for f in frames]
    pickle.dumps(admitted)
    with ProcessPoolExecutor(1) as pool:
        opened = list(pool.map(open_admitted, admitted))
    assert opened == msgs
    for m in opened:
        ch.node.receive_message(m)
    assert ch.node.transport.statistics()["key_updates_received"] == 2


def test_a_failure_from_a_worker_is_picklable_and_fails_the_session() -> None:
    """A frame that fails to open in a worker raises the transport's error there; the
    session records it and refuses the next frame with the same code."""
    ch = FrameChannel.open()
    frame = bytearray(ch.coordinator.send(Echo(1)))
    frame[20] ^= 1
    admitted = ch.node.admit(bytes(frame))
    with ProcessPoolExecutor(1) as pool, pytest.raises(FrameError) as err:
        pool.submit(open_admitted, admitted).result()
    assert err.value.code is CloseCode.DECRYPT_FAILED
    ch.node.fail(err.value, admitted)
    assert ch.node.transport.statistics()["frames_received"] == 0
    with pytest.raises(FrameError):
        ch.node.admit(ch.coordinator.send(Echo(2)))


def test_idle_time_reads_the_injected_clock() -> None:
    """idle_s counts seconds of the injected clock since the last received message."""
    now = [100.0]
    ch = FrameChannel.open(clock=lambda: now[0])
    now[0] = 112.5
    assert ch.node.idle_s() == 12.5
    ch.send(C, Echo(1))
    ch.deliver(N)
    assert ch.node.idle_s() == 0.0


def test_refuse_and_close_code_mapping() -> None:
    """Input that never reached the transport fails the session through refuse();
    close_code_for maps protocol errors to their code and anything else to 4000."""
    ch = FrameChannel.open()
    with pytest.raises(ProtocolError) as err:
        ch.node.refuse(CloseCode.PROTOCOL_ERROR, "TEXT frame")
    assert ch.node.failed is err.value
    assert close_code_for(RuntimeError("bug")) is CloseCode.PROTOCOL_ERROR
    assert close_reason(CloseCode.UNEXPECTED_MESSAGE) == b"unexpected_message"


def test_session_needs_a_transport_of_its_role() -> None:
    """A node session over a coordinator transport is refused locally."""
    ch = FrameChannel.open()
    with pytest.raises(LocalProtocolError):
        Session(N, ch.coordinator.transport)


class FakeClock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reply(i: int) -> Message:
    return EchoReply(i) if i % 2 else ProbeReply(i, bytes(32))


def test_late_and_unmatched_replies_within_the_requests_sent_are_not_excess() -> None:
    """Every reply a request can explain counts for nothing: 200 requests answered much
    later (the waiters long gone), under other nonces, all at once, keep the session."""
    clock = FakeClock()
    ch = FrameChannel.open(clock=clock)
    for i in range(200):
        ch.send(C, Echo(i) if i % 2 else Probe(i, bytes(32)))
    clock.now += 3600.0  # every waiter has timed out: these replies are late
    for i in range(200):
        ch.send(N, reply(i + 10_000))  # nonces nobody asked for: still one per request
    assert len(ch.deliver(C)) == 200
    assert ch.coordinator.excess_replies == 0 and ch.coordinator.failed is None


def test_excess_replies_are_let_through_up_to_the_burst_then_rate_limited() -> None:
    """Replies beyond the requests sent: EXCESS_REPLY_BURST at once are accepted (and
    ignored by the I/O layer), the next fails the session with RATE_LIMITED naming the
    count; the session then refuses everything with that code."""
    clock = FakeClock()
    ch = FrameChannel.open(clock=clock)
    ch.send(C, Echo(1))
    for i in range(EXCESS_REPLY_BURST + 1):  # one answers the echo
        ch.send(N, reply(i))
    assert len(ch.deliver(C)) == EXCESS_REPLY_BURST + 1
    assert ch.coordinator.excess_replies == EXCESS_REPLY_BURST
    ch.send(N, EchoReply(99))
    with pytest.raises(ProtocolError) as err:
        ch.deliver(C)
    assert close_code_for(err.value) is CloseCode.RATE_LIMITED
    assert f"{EXCESS_REPLY_BURST + 1} echo/probe replies beyond the requests sent" in str(err.value)
    assert ch.coordinator.failed is err.value
    with pytest.raises(LocalProtocolError):
        ch.send(C, Echo(2))


def test_excess_replies_at_the_refill_rate_are_tolerated_faster_ones_are_not() -> None:
    """The allowance refills at EXCESS_REPLIES_PER_S: excess replies at that rate never
    close the session; at twice that rate it closes after about twice the burst."""
    clock = FakeClock()
    slow = FrameChannel.open(clock=clock)
    for i in range(10 * EXCESS_REPLY_BURST):
        clock.now += 1.0 / EXCESS_REPLIES_PER_S
        slow.send(N, reply(i))
        slow.deliver(C)
    assert slow.coordinator.failed is None
    fast = FrameChannel.open(clock=clock)
    accepted = 0
    with pytest.raises(ProtocolError) as err:
        for i in range(10 * EXCESS_REPLY_BURST):
            clock.now += 0.5 / EXCESS_REPLIES_PER_S
            fast.send(N, reply(i))
            fast.deliver(C)
            accepted += 1
    assert err.value.code is CloseCode.RATE_LIMITED
    assert 2 * EXCESS_REPLY_BURST - 2 <= accepted <= 2 * EXCESS_REPLY_BURST + 1


def test_the_node_side_does_not_meter_requests() -> None:
    """Requests (echo, probe) from the coordinator are not replies: the node's session
    takes any number of them."""
    ch = FrameChannel.open(clock=FakeClock())
    for i in range(4 * EXCESS_REPLY_BURST):
        ch.send(C, Echo(i))
    assert len(ch.deliver(N)) == 4 * EXCESS_REPLY_BURST
    assert ch.node.excess_replies == 0
