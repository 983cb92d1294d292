"""The session state machine of netcheck/1 as a table (docs/protocol.md §6).

Both parties walk the same conversation: ``AWAIT_HELLO -> AWAIT_WELCOME -> AWAIT_AUTH
-> OPEN``, then per job ``OPEN -> JOB_OFFERED -> JOB_PENDING -> RUNNING -> OPEN``, and
``bye`` ends in ``CLOSED``. ``TRANSITIONS[(role, state, type)]`` is the state after
``role`` sends or receives a message of that type; which of the two is fixed by the
type (``SENDERS``). A missing key is an illegal message (as in h11's ``_state.py``).

The I/O layer may keep one job state per round id (each starting at ``OPEN``) and
check ``echo``/``probe``/``bye`` against the session state; the table serves both uses.
"""

from __future__ import annotations

from enum import StrEnum

from netcheck.errors import CloseCode, MessageError


class Role(StrEnum):
    """The two parties: the node (websocket client) and the coordinator (server)."""

    NODE = "node"
    COORDINATOR = "coordinator"


class State(StrEnum):
    """Session states (docs/protocol.md §6)."""

    AWAIT_HELLO = "await_hello"
    AWAIT_WELCOME = "await_welcome"
    AWAIT_AUTH = "await_auth"
    OPEN = "open"
    JOB_OFFERED = "job_offered"  # job sent, not yet acknowledged
    JOB_PENDING = "job_pending"  # node holds the job and acknowledged it
    RUNNING = "running"  # job key released; node computes
    CLOSED = "closed"


N, C = Role.NODE, Role.COORDINATOR

# docs/protocol.md §6.1 — who may send each message type.
SENDERS: dict[str, frozenset[Role]] = {
    "hello": frozenset({N}),
    "welcome": frozenset({C}),
    "auth": frozenset({N}),
    "job": frozenset({C}),
    "ack": frozenset({N}),
    "release": frozenset({C}),
    "result": frozenset({N}),
    "echo": frozenset({C}),
    "echo_reply": frozenset({N}),
    "probe": frozenset({C}),
    "probe_reply": frozenset({N}),
    "error": frozenset({N}),
    "verdict": frozenset({C}),
    "bye": frozenset({N, C}),
}

_ACTIVE = (State.OPEN, State.JOB_OFFERED, State.JOB_PENDING, State.RUNNING)
_JOB = (State.JOB_OFFERED, State.JOB_PENDING, State.RUNNING)


def _conversation() -> dict[tuple[State, str], State]:
    edges: dict[tuple[State, str], State] = {
        (State.AWAIT_HELLO, "hello"): State.AWAIT_WELCOME,
        (State.AWAIT_WELCOME, "welcome"): State.AWAIT_AUTH,
        (State.AWAIT_AUTH, "auth"): State.OPEN,
        (State.OPEN, "job"): State.JOB_OFFERED,
        (State.JOB_OFFERED, "ack"): State.JOB_PENDING,
        (State.JOB_PENDING, "release"): State.RUNNING,
        (State.RUNNING, "result"): State.OPEN,
    }
    for state in _JOB:
        edges[(state, "error")] = State.OPEN
    for state in _ACTIVE:
        edges[(state, "echo")] = state
        edges[(state, "echo_reply")] = state
        edges[(state, "probe")] = state
        edges[(state, "probe_reply")] = state
        edges[(state, "verdict")] = state  # a past round's verdict, any time (§5.11)
        edges[(state, "bye")] = State.CLOSED
    return edges


TRANSITIONS: dict[tuple[Role, State, str], State] = {
    (role, state, msg_type): target
    for role in Role
    for (state, msg_type), target in _conversation().items()
}


def sends(role: Role, msg_type: str) -> bool:
    """True if ``role`` may send messages of ``msg_type`` (False for unknown types)."""
    return role in SENDERS.get(msg_type, frozenset())


def next_state(role: Role, state: State, msg_type: str) -> State:
    """The state after ``role`` sends or receives ``msg_type`` in ``state``.

    Raises:
        MessageError: UNEXPECTED_MESSAGE naming role, state and message type, if the
            table has no such transition.
    """
    try:
        return TRANSITIONS[(role, state, msg_type)]
    except KeyError:
        raise MessageError(
            CloseCode.UNEXPECTED_MESSAGE,
            f"{role}: message {msg_type!r} not allowed in state {state.name}",
        ) from None


def mermaid(role: Role) -> str:
    """Render ``role``'s transitions as a Mermaid ``stateDiagram-v2`` (for §6)."""
    lines = ["stateDiagram-v2", f"    [*] --> {State.AWAIT_HELLO.name}"]
    for (r, state, msg_type), target in TRANSITIONS.items():
        if r is role:
            verb = "send" if sends(role, msg_type) else "recv"
            if msg_type == "bye":
                verb = "send/recv"
            lines.append(f"    {state.name} --> {target.name}: {verb} {msg_type}")
    lines.append(f"    {State.CLOSED.name} --> [*]")
    return "\n".join(lines) + "\n"
