"""The session state table (docs/protocol.md §6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from netcheck.errors import CloseCode, MessageError
from netcheck.protocol.messages import FRAME_TYPES, HANDSHAKE_TYPES, MESSAGE_TYPES
from netcheck.protocol.states import SENDERS, TRANSITIONS, Role, State, mermaid, next_state

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def walk(role: Role, types: list[str]) -> State:
    state = State.AWAIT_HELLO
    for msg_type in types:
        state = next_state(role, state, msg_type)
    return state


@pytest.mark.parametrize("role", list(Role))
def test_full_session(role):
    """A handshake, two jobs with echoes, and bye end CLOSED for both roles."""
    job = ["job", "ack", "echo", "echo_reply", "release", "result"]
    path = ["hello", "welcome", "auth", *job, "job", "ack", "release", "error", "bye"]
    assert walk(role, path) is State.CLOSED


@pytest.mark.parametrize(
    ("state", "msg_type"),
    [
        (State.AWAIT_HELLO, "welcome"),
        (State.AWAIT_HELLO, "job"),
        (State.OPEN, "hello"),
        (State.OPEN, "release"),
        (State.OPEN, "result"),
        (State.JOB_OFFERED, "release"),
        (State.JOB_PENDING, "result"),
        (State.RUNNING, "job"),
        (State.CLOSED, "echo"),
        (State.OPEN, "no-such-type"),
    ],
)
def test_illegal_transitions(state, msg_type):
    """A missing table entry is UNEXPECTED_MESSAGE naming the state and the message."""
    with pytest.raises(MessageError) as err:
        next_state(Role.NODE, state, msg_type)
    assert err.value.code is CloseCode.UNEXPECTED_MESSAGE
    assert state.name in err.value.reason and msg_type in err.value.reason


def test_table_only_uses_known_types():
    """Every message type has senders, and the table names only known types."""
    assert set(SENDERS) == set(MESSAGE_TYPES)
    assert {msg_type for (_, _, msg_type) in TRANSITIONS} == set(MESSAGE_TYPES)
    assert set(MESSAGE_TYPES) == HANDSHAKE_TYPES | FRAME_TYPES


def test_handshake_messages_only_in_handshake_states():
    """Handshake types appear only in the three handshake states."""
    early = {State.AWAIT_HELLO, State.AWAIT_WELCOME, State.AWAIT_AUTH}
    for (_, state, msg_type), _next in TRANSITIONS.items():
        assert (msg_type in HANDSHAKE_TYPES) == (state in early)


def test_closed_is_terminal():
    """Nothing leaves CLOSED."""
    assert not [key for key in TRANSITIONS if key[1] is State.CLOSED]


@pytest.mark.parametrize("role", list(Role))
def test_mermaid_rendering_matches_the_spec(role):
    """docs/protocol.md embeds the current Mermaid rendering of each role's table."""
    diagram = mermaid(role)
    assert diagram.startswith("stateDiagram-v2\n")
    assert diagram.rstrip("\n") in DOC.read_text()
