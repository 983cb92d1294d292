"""One close code per kind of fault, whatever else the message gets wrong
(docs/protocol.md §8.1): a misplaced message type is UNEXPECTED_MESSAGE before its
fields are looked at; a counter that is not the next one is COUNTER_MISMATCH, even 2^32."""

from __future__ import annotations

import msgpack
import pytest
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from protocol_support import CLAIM

from netcheck.errors import CloseCode, HandshakeError, ProtocolError
from netcheck.protocol import CoordinatorHandshake, NodeHandshake, Transport
from netcheck.protocol.states import Role
from netcheck.protocol.transport import _aad

#: misplaced messages: valid fields, and fields that fail the type's schema
WRONG_TYPES = {
    "welcome-valid": {
        "t": "welcome", "version": "netcheck/1", "suite": "s", "ephemeral": b"e" * 32,
        "nonce": b"n" * 32, "coordinator_key": b"k" * 32, "signature": b"s" * 64,
    },
    "welcome-bad-fields": {"t": "welcome", "version": 7},
    "job-bad-fields": {"t": "job", "round_id": "r"},
    "echo-valid": {"t": "echo", "nonce": 1},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(WRONG_TYPES))
def test_wrong_type_instead_of_hello_is_unexpected(coord_id, name):
    """Any known type but hello, valid or not, is UNEXPECTED_MESSAGE (was 4009 when its
    fields failed their schema, 4010 otherwise)."""
    data = msgpack.packb(WRONG_TYPES[name], use_bin_type=True)
    with pytest.raises(HandshakeError) as err:
        CoordinatorHandshake(coord_id, lambda k: True).receive_hello(data)
    assert err.value.code is CloseCode.UNEXPECTED_MESSAGE, err.value.reason


def test_unknown_type_and_bad_fields_of_the_expected_type_are_malformed(node_id, coord_id):
    """An unknown ``t``, or the expected type with bad fields, stays MALFORMED_MESSAGE."""
    for bad in ({"t": "nonsense"}, {"t": "hello", "versions": 1}):
        data = msgpack.packb(bad, use_bin_type=True)
        with pytest.raises(HandshakeError) as err:
            CoordinatorHandshake(coord_id, lambda k: True).receive_hello(data)
        assert err.value.code is CloseCode.MALFORMED_MESSAGE
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    node.start()
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(msgpack.packb({"t": "auth", "claim": 1}, use_bin_type=True))
    assert err.value.code is CloseCode.UNEXPECTED_MESSAGE


def _frame(sender: Role, key: bytes, sid: bytes, counter: int, plaintext: bytes) -> bytes:
    """A data frame sealed by hand (§3.1, §3.2), for plaintexts seal() refuses to write."""
    c = counter.to_bytes(8, "big")
    return (
        b"\x01"
        + c
        + ChaCha20Poly1305(key).encrypt(bytes(4) + c, plaintext, _aad(sid, sender, c, 1))
    )


@pytest.mark.parametrize(
    ("msg", "code"),
    [
        ({"t": "hello", "versions": 1}, CloseCode.UNEXPECTED_MESSAGE),
        ({"t": "ack", "round_id": 5}, CloseCode.UNEXPECTED_MESSAGE),
        ({"t": "job", "round_id": "r"}, CloseCode.MALFORMED_MESSAGE),
    ],
    ids=["handshake-type-bad-fields", "node-type-bad-fields", "coordinator-type-bad-fields"],
)
def test_type_the_peer_may_not_send_is_unexpected_in_a_frame(msg, code):
    """In a frame to the node: a handshake type, or a type only nodes send, is
    UNEXPECTED_MESSAGE even when its fields are invalid (was MALFORMED_MESSAGE); a type
    the coordinator may send with bad fields stays MALFORMED_MESSAGE."""
    k_nc, k_cn, sid = bytes(32), bytes([1]) * 32, bytes(16)
    node = Transport(Role.NODE, k_nc, k_cn, sid)
    frame = _frame(Role.COORDINATOR, k_cn, sid, 0, msgpack.packb(msg, use_bin_type=True))
    with pytest.raises(ProtocolError) as err:
        node.open(frame)
    assert err.value.code is code


def test_counter_two_to_the_32_early_is_a_mismatch():
    """A frame numbered 2^32 (= max_counter) while frame 0 is expected is
    COUNTER_MISMATCH: COUNTER_EXHAUSTED only once max_counter frames were accepted."""
    k_nc, k_cn, sid = bytes(32), bytes([1]) * 32, bytes(16)
    node = Transport(Role.NODE, k_nc, k_cn, sid)
    frame = _frame(Role.COORDINATOR, k_cn, sid, 2**32, msgpack.packb({"t": "echo", "nonce": 1}))
    with pytest.raises(ProtocolError) as err:
        node.open(frame)
    assert err.value.code is CloseCode.COUNTER_MISMATCH
