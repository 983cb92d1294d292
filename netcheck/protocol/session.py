"""The session after the handshake, sans-I/O (docs/protocol.md §5, §6; docs/session-core.md).

A :class:`Session` wraps one side's :class:`~netcheck.protocol.transport.Transport` and
walks :data:`netcheck.protocol.states.TRANSITIONS` for every message sent or received:
``job``, ``ack``, ``release``, ``result`` and ``error`` per round id (each round starts
at ``OPEN`` and is dropped when it is back there), ``echo``, ``probe``, ``verdict`` and
``bye`` against the session state. Bytes in (:meth:`Session.receive_frame`, or
:meth:`Session.admit` then :meth:`Session.receive_message` when the frame is opened
elsewhere), messages out; messages in (:meth:`Session.send`), bytes out. No sockets,
no asyncio: the I/O layers (``coordinator/session.py``, ``node/client.py``) move bytes,
keep timers and futures, and close with :func:`close_code_for`.

Errors split as in h11: a message the peer may not send now is a
:class:`~netcheck.errors.MessageError` (UNEXPECTED_MESSAGE), after which the session is
failed and every later call raises the same code; a message *we* may not send now is a
:class:`~netcheck.errors.LocalProtocolError` and changes nothing.

The table allows ``echo_reply`` and ``probe_reply`` in any state, and a late one is
legal, so the session also counts them against the requests it sent: replies beyond
those (*excess* replies: no request can explain them) are metered by a token bucket
(:data:`EXCESS_REPLY_BURST`, :data:`EXCESS_REPLIES_PER_S`), and a peer that keeps
sending them fails the session with RATE_LIMITED (docs/protocol.md §5.6).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NoReturn

from netcheck.errors import CloseCode, LocalProtocolError, MessageError, ProtocolError
from netcheck.protocol.messages import Message
from netcheck.protocol.states import Role, State, next_state
from netcheck.protocol.transport import AdmittedFrame, Transport

#: Message types whose state is kept per round id (docs/protocol.md §6.2).
JOB_TYPES = frozenset({"job", "ack", "release", "result", "error"})
#: Requests that the peer answers with one reply each (§5.6, §5.9), and those replies.
REQUEST_TYPES = frozenset({"echo", "probe"})
REPLY_TYPES = frozenset({"echo_reply", "probe_reply"})
#: Excess replies (beyond the requests sent, §5.6) a session lets through at once: they
#: are ignored like any reply nobody waits for. An honest peer sends none.
EXCESS_REPLY_BURST = 32
#: ... and the rate at which that allowance refills, per second. A peer that sends
#: excess replies faster for long enough (more than ``EXCESS_REPLY_BURST`` beyond this
#: rate) fails the session with RATE_LIMITED.
EXCESS_REPLIES_PER_S = 1.0

Clock = Callable[[], float]


def close_code_for(exc: BaseException) -> CloseCode:
    """The close code that ends a session after ``exc`` (docs/protocol.md §8): a
    :class:`ProtocolError` closes with its own code; anything else (a bug or a local
    failure, never the peer's fault) with PROTOCOL_ERROR, without internals."""
    return exc.code if isinstance(exc, ProtocolError) else CloseCode.PROTOCOL_ERROR


def close_reason(code: CloseCode) -> bytes:
    """The close frame's reason for ``code``: its name in lower case (what both sides
    have always sent; under RFC 6455's 123-byte limit)."""
    return code.name.lower().encode()


class Session:
    """One side of an open session (after the handshake).

    Args:
        role: our role.
        transport: the session's transport (``NodeHandshake.transport()``,
            ``Accepted.transport``).
        clock: monotonic clock in seconds for :meth:`idle_s` (default
            ``time.monotonic``; the transport keeps its own for key updates).

    Attributes:
        state: ``OPEN`` until a ``bye`` is sent or received (then ``CLOSED``).
        excess_replies: replies received beyond the requests sent (§5.6), in all.
    """

    def __init__(self, role: Role, transport: Transport, *, clock: Clock = time.monotonic):
        if transport.role is not role:
            raise LocalProtocolError(f"a {role} session needs a {role} transport")
        self.role = role
        self.transport = transport
        self.state = State.OPEN
        self._clock = clock
        self._jobs: dict[str, State] = {}
        self._failed: ProtocolError | None = None
        self._last_received_s = clock()
        self._unanswered = 0  # requests sent minus replies received, never below 0
        self._excess_tokens = float(EXCESS_REPLY_BURST)
        self._excess_stamp_s = self._last_received_s
        self.excess_replies = 0

    @property
    def session_id(self) -> bytes:
        """16-byte session id (docs/protocol.md §2.4)."""
        return self.transport.session_id

    @property
    def failed(self) -> ProtocolError | None:
        """The error that ended the session (received input), or None."""
        return self._failed

    def job_state(self, round_id: str) -> State:
        """The state of round ``round_id`` on this session (``OPEN``: no job)."""
        return self._jobs.get(round_id, State.OPEN)

    def jobs(self) -> dict[str, State]:
        """Rounds with a job in flight on this session and their states (a copy)."""
        return dict(self._jobs)

    def idle_s(self) -> float:
        """Seconds of ``clock`` since the last message was received (or since the
        session opened)."""
        return self._clock() - self._last_received_s

    def _target(self, msg: Message) -> tuple[str | None, State]:
        """(round id or None, next state) after ``msg``; raises MessageError."""
        if self.state is State.CLOSED:
            raise MessageError(CloseCode.UNEXPECTED_MESSAGE, f"{self.role}: {msg.TYPE!r} after bye")
        if msg.TYPE in JOB_TYPES:
            round_id: str = getattr(msg, "round_id")  # noqa: B009 (every job type has one)
            try:
                return round_id, next_state(self.role, self.job_state(round_id), msg.TYPE)
            except MessageError as exc:
                raise MessageError(exc.code, f"{exc.reason} (round {round_id!r})") from None
        return None, next_state(self.role, self.state, msg.TYPE)

    def _step(self, round_id: str | None, target: State) -> None:
        if round_id is None:
            self.state = target
        elif target is State.OPEN:
            self._jobs.pop(round_id, None)
        else:
            self._jobs[round_id] = target

    def send(self, msg: Message) -> bytes:
        """Check ``msg`` against the table, seal it and take the transition; returns the
        frame to write (one websocket binary message). Frames must be written in the
        order they were returned.

        Raises:
            LocalProtocolError: ``msg`` may not be sent now (e.g. a ``release`` for a
                round whose ``ack`` has not arrived), the session failed or closed, or
                as :meth:`Transport.seal` (counter exhausted, message too large). The
                state is then unchanged.
        """
        if self._failed is not None:
            raise LocalProtocolError(f"session failed earlier: {self._failed}")
        try:
            round_id, target = self._target(msg)
        except MessageError as exc:
            raise LocalProtocolError(exc.reason) from None
        frame = self.transport.seal(msg)
        self._step(round_id, target)
        if msg.TYPE in REQUEST_TYPES:
            self._unanswered += 1
        return frame

    def admit(self, frame: bytes) -> AdmittedFrame:
        """Take a received frame's place in the sequence (:meth:`Transport.admit`);
        open it with :func:`~netcheck.protocol.transport.open_admitted` (anywhere),
        then pass the message to :meth:`receive_message`, or a failure to :meth:`fail`.

        Raises:
            ProtocolError: as :meth:`Transport.admit`; the session is then failed.
        """
        self._raise_if_failed()
        try:
            return self.transport.admit(frame)
        except ProtocolError as exc:
            self._failed = exc
            raise

    def fail(self, exc: ProtocolError, admitted: AdmittedFrame | None = None) -> None:
        """Record that ``admitted`` failed to open with ``exc`` (see :meth:`admit`)."""
        self.transport.fail(exc, admitted)
        if self._failed is None:
            self._failed = exc

    def receive_message(self, msg: Message) -> Message:
        """Check a message opened from an admitted frame against the table and take the
        transition; returns ``msg`` (the event for the I/O layer).

        Raises:
            MessageError: UNEXPECTED_MESSAGE naming the state, type and round (e.g. an
                ``ack`` for a round with no job, a second ``result``, anything after
                ``bye``); the session is then failed.
        """
        self._raise_if_failed()
        try:
            round_id, target = self._target(msg)
        except MessageError as exc:
            self._failed = exc
            raise
        now = self._clock()
        if msg.TYPE in REPLY_TYPES:
            self._count_reply(msg.TYPE, now)
        self._step(round_id, target)
        self._last_received_s = now
        return msg

    def _count_reply(self, msg_type: str, now: float) -> None:
        """Match a received reply against the requests sent; an excess one spends a
        token of the excess bucket, and with none left the session fails.

        Raises:
            ProtocolError: RATE_LIMITED, the session is then failed.
        """
        if self._unanswered > 0:
            self._unanswered -= 1
            return
        self.excess_replies += 1
        elapsed = max(0.0, now - self._excess_stamp_s)
        self._excess_tokens = min(
            float(EXCESS_REPLY_BURST), self._excess_tokens + elapsed * EXCESS_REPLIES_PER_S
        )
        self._excess_stamp_s = now
        if self._excess_tokens < 1.0:
            self.refuse(
                CloseCode.RATE_LIMITED,
                f"{self.excess_replies} echo/probe replies beyond the requests sent "
                f"(last: {msg_type}); allowed: {EXCESS_REPLY_BURST} at once, "
                f"{EXCESS_REPLIES_PER_S:g} per second",
            )
        self._excess_tokens -= 1.0

    def receive_frame(self, frame: bytes) -> Message:
        """Open one received frame and check it against the table (:meth:`admit`,
        :func:`open_admitted`, :meth:`receive_message` in one call).

        Raises:
            ProtocolError: as :meth:`Transport.open` and :meth:`receive_message`.
        """
        self._raise_if_failed()
        try:
            msg = self.transport.open(frame)
        except ProtocolError as exc:
            self._failed = exc
            raise
        return self.receive_message(msg)

    def refuse(self, code: CloseCode, reason: str) -> NoReturn:
        """Fail the session for input that never reached the transport (a text or
        oversized websocket message, a bad signature on a verdict notice...) and raise
        it, so that every such case closes through :func:`close_code_for`.

        Raises:
            ProtocolError: always, with ``code``.
        """
        exc = ProtocolError(code, reason)
        if self._failed is None:
            self._failed = exc
        raise exc

    def forget(self, round_id: str) -> None:
        """Drop round ``round_id`` (the round is over on our side): a later ``ack``,
        ``result`` or ``error`` for it is then UNEXPECTED_MESSAGE."""
        self._jobs.pop(round_id, None)

    def _raise_if_failed(self) -> None:
        if self._failed is not None:
            raise type(self._failed)(self._failed.code, "session failed earlier")
