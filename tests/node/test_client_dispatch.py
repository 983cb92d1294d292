"""netcheck.node.client: one dispatch table for what the coordinator sends."""

from __future__ import annotations

from typing import Any

import pytest

from netcheck.errors import CloseCode, ProtocolError
from netcheck.node.client import (
    FROM_COORDINATOR,
    IGNORED_FROM_COORDINATOR,
    REFUSED_FROM_COORDINATOR,
    NodeClient,
)
from netcheck.protocol.messages import MESSAGE_TYPES


def test_every_message_type_is_handled_ignored_or_refused_exactly_once() -> None:
    """Each type of protocol/messages.py is in exactly one of the node's sets."""
    sets = [set(FROM_COORDINATOR), set(IGNORED_FROM_COORDINATOR), set(REFUSED_FROM_COORDINATOR)]
    assert set().union(*sets) == set(MESSAGE_TYPES.values())
    assert sum(len(s) for s in sets) == len(MESSAGE_TYPES)


@pytest.mark.parametrize("cls", sorted(REFUSED_FROM_COORDINATOR, key=lambda c: c.__name__))  # type: ignore[attr-defined]
async def test_refused_types_close_with_unexpected_message(cls: type[Any]) -> None:
    """A refused type is an UNEXPECTED_MESSAGE protocol error; ignored ones pass."""
    client = NodeClient.__new__(NodeClient)  # routing reads no client state
    session: Any = None
    with pytest.raises(ProtocolError) as info:
        await client._handle(session, cls.__new__(cls))
    assert info.value.code == CloseCode.UNEXPECTED_MESSAGE
    for ignored in IGNORED_FROM_COORDINATOR:
        await client._handle(session, ignored.__new__(ignored))
