"""netcheck.coordinator.session: one dispatch table for what a node sends."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from netcheck.coordinator.session import (
    ENDS_SESSION,
    FROM_NODE,
    REFUSED_FROM_NODE,
    NodeSession,
)
from netcheck.errors import CloseCode, ProtocolError
from netcheck.protocol.messages import MESSAGE_TYPES


def test_every_message_type_is_handled_ended_or_refused_exactly_once() -> None:
    """Each type of protocol/messages.py is in exactly one of the coordinator's sets."""
    sets = [set(FROM_NODE), set(ENDS_SESSION), set(REFUSED_FROM_NODE)]
    assert set().union(*sets) == set(MESSAGE_TYPES.values())
    assert sum(len(s) for s in sets) == len(MESSAGE_TYPES)


@pytest.mark.parametrize("cls", sorted(REFUSED_FROM_NODE, key=lambda c: c.__name__))  # type: ignore[attr-defined]
def test_refused_types_close_with_unexpected_message(cls: type[Any]) -> None:
    """A refused type reaching the dispatcher is an UNEXPECTED_MESSAGE protocol error."""
    session = NodeSession.__new__(NodeSession)  # the refusal reads no session state
    opened: Any = SimpleNamespace(message=cls.__new__(cls))
    with pytest.raises(ProtocolError) as info:
        session._dispatch(opened, 0)
    assert info.value.code == CloseCode.UNEXPECTED_MESSAGE
    assert f"{cls.__name__} not allowed from a node" in str(info.value)
