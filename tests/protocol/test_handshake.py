"""Handshake state machines: success, identity checks, negotiation and misuse."""

from __future__ import annotations

import dataclasses

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from protocol_support import CLAIM, seeded

from netcheck.errors import CloseCode, HandshakeError, LocalProtocolError
from netcheck.keys import public_key_bytes
from netcheck.protocol import (
    CoordinatorHandshake,
    Echo,
    EchoReply,
    NodeHandshake,
    ProfileClaim,
    decode_message,
    encode_message,
)
from netcheck.protocol.handshake import MAX_HANDSHAKE_BYTES, SUITE, VERSION


def _edit(data: bytes, **changes: object) -> bytes:
    """Decode a handshake message, replace fields, re-encode it."""
    return encode_message(dataclasses.replace(decode_message(data), **changes))


def test_success_both_sides_agree(connect):
    """A full handshake gives both sides the same session id and working keys."""
    pair = connect()
    assert pair.node_transport.session_id == pair.accepted.session_id
    assert len(pair.accepted.session_id) == 16
    assert pair.accepted.claim == CLAIM
    assert pair.accepted.node_key == public_key_bytes(pair.node._identity)
    frame = pair.coordinator_transport.seal(Echo(7))
    assert pair.node_transport.open(frame) == Echo(7)
    assert pair.coordinator_transport.open(pair.node_transport.seal(EchoReply(7))) == EchoReply(7)


def test_messages_are_small_and_versioned(connect):
    """Handshake messages fit in 2 KiB and negotiate netcheck/1 with the one suite."""
    pair = connect()
    for data in (pair.hello, pair.welcome, pair.auth):
        assert len(data) <= MAX_HANDSHAKE_BYTES
    welcome = decode_message(pair.welcome)
    assert (welcome.version, welcome.suite) == (VERSION, SUITE)


def test_sessions_are_fresh(connect):
    """Two handshakes between the same parties give different session ids."""
    assert connect().accepted.session_id != connect().accepted.session_id


def test_deterministic_with_injected_randomness(node_id, coord_id):
    """With the same injected randomness, the handshake bytes repeat exactly."""

    def run() -> tuple[bytes, bytes]:
        node = NodeHandshake(node_id, coord_id.public_key(), CLAIM, random_bytes=seeded(1))
        coord = CoordinatorHandshake(coord_id, lambda k: True, random_bytes=seeded(2))
        hello = node.start()
        return hello, coord.receive_hello(hello)

    assert run() == run()


def test_unknown_node_key_rejected(node_id, coord_id):
    """admit() returning False gives UNKNOWN_NODE_KEY, and admit sees the raw key."""
    seen: list[bytes] = []

    def admit(key: bytes) -> bool:
        seen.append(key)
        return False

    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    coord = CoordinatorHandshake(coord_id, admit)
    with pytest.raises(HandshakeError) as err:
        coord.receive_hello(node.start())
    assert err.value.code is CloseCode.UNKNOWN_NODE_KEY
    assert seen == [public_key_bytes(node_id)]


def test_wrong_pinned_key_rejected_by_coordinator(node_id, coord_id):
    """A hello naming another coordinator key is refused with WRONG_COORDINATOR_KEY."""
    other = Ed25519PrivateKey.generate()
    node = NodeHandshake(node_id, other.public_key(), CLAIM)
    with pytest.raises(HandshakeError) as err:
        CoordinatorHandshake(coord_id, lambda k: True).receive_hello(node.start())
    assert err.value.code is CloseCode.WRONG_COORDINATOR_KEY


def test_substituted_welcome_rejected_by_node(node_id, coord_id):
    """A validly signed welcome from an impostor coordinator is WRONG_COORDINATOR_KEY."""
    impostor = Ed25519PrivateKey.generate()
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    hello = node.start()
    # The impostor answers as if the node had pinned the impostor's key.
    forged_hello = _edit(hello, coordinator_key=public_key_bytes(impostor))
    welcome = CoordinatorHandshake(impostor, lambda k: True).receive_hello(forged_hello)
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(welcome)
    assert err.value.code is CloseCode.WRONG_COORDINATOR_KEY


def test_no_common_version(node_id, coord_id):
    """A hello offering only unknown versions is VERSION_MISMATCH."""
    hello = NodeHandshake(node_id, coord_id.public_key(), CLAIM).start()
    with pytest.raises(HandshakeError) as err:
        CoordinatorHandshake(coord_id, lambda k: True).receive_hello(
            _edit(hello, versions=("netcheck/0",))
        )
    assert err.value.code is CloseCode.VERSION_MISMATCH


def test_no_common_suite(node_id, coord_id):
    """A hello offering only unknown suites is VERSION_MISMATCH."""
    hello = NodeHandshake(node_id, coord_id.public_key(), CLAIM).start()
    with pytest.raises(HandshakeError) as err:
        CoordinatorHandshake(coord_id, lambda k: True).receive_hello(
            _edit(hello, suites=("rsa-md5",))
        )
    assert err.value.code is CloseCode.VERSION_MISMATCH


@pytest.mark.parametrize("field", ["version", "suite"])
def test_welcome_choosing_unoffered_option(node_id, coord_id, field):
    """A welcome choosing a version or suite the node did not offer is VERSION_MISMATCH."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    welcome = CoordinatorHandshake(coord_id, lambda k: True).receive_hello(node.start())
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(_edit(welcome, **{field: "netcheck/0"}))
    assert err.value.code is CloseCode.VERSION_MISMATCH


def test_path_is_bound(node_id, coord_id):
    """Different endpoint paths give different transcripts: BAD_SIGNATURE."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM, path="/v1/ws")
    coord = CoordinatorHandshake(coord_id, lambda k: True, path="/other")
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(coord.receive_hello(node.start()))
    assert err.value.code is CloseCode.BAD_SIGNATURE


def test_claim_is_signed(connect, node_id, coord_id):
    """Editing the profile claim in flight breaks the node's signature."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    coord = CoordinatorHandshake(coord_id, lambda k: True)
    auth = node.receive_welcome(coord.receive_hello(node.start()))
    forged = dataclasses.replace(CLAIM, profile="big-gpu")
    with pytest.raises(HandshakeError) as err:
        coord.receive_auth(_edit(auth, claim=forged))
    assert err.value.code is CloseCode.BAD_SIGNATURE


def test_node_key_equal_to_coordinator_key(coord_id):
    """A node presenting the coordinator's own key is BAD_HANDSHAKE."""
    node = NodeHandshake(coord_id, coord_id.public_key(), CLAIM)
    with pytest.raises(HandshakeError) as err:
        CoordinatorHandshake(coord_id, lambda k: True).receive_hello(node.start())
    assert err.value.code is CloseCode.BAD_HANDSHAKE


def test_wrong_message_type(node_id, coord_id):
    """A hello where a welcome is expected is UNEXPECTED_MESSAGE."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    hello = node.start()
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(hello)
    assert err.value.code is CloseCode.UNEXPECTED_MESSAGE


def test_malformed_handshake_message(coord_id):
    """Garbage instead of a hello is MALFORMED_MESSAGE as a HandshakeError."""
    with pytest.raises(HandshakeError) as err:
        CoordinatorHandshake(coord_id, lambda k: True).receive_hello(b"\xc1")
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


def test_non_canonical_encoding_rejected(node_id, coord_id):
    """A hello with its fields in another order is refused (MALFORMED_MESSAGE)."""
    import msgpack

    hello = NodeHandshake(node_id, coord_id.public_key(), CLAIM).start()
    fields = msgpack.unpackb(hello)
    reordered = msgpack.packb(dict(reversed(list(fields.items()))), use_bin_type=True)
    assert decode_message(reordered) == decode_message(hello)
    with pytest.raises(HandshakeError) as err:
        CoordinatorHandshake(coord_id, lambda k: True).receive_hello(reordered)
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


def test_fingerprint_in_unsorted_order_is_refused(node_id, coord_id):
    """The fingerprint map inside the signed claim has one encoding too (keys sorted,
    docs/protocol.md §4.1): an auth whose fingerprint keys come in another order, even
    validly signed over those bytes, is MALFORMED_MESSAGE, and a claim built in any
    order encodes sorted."""
    claim = ProfileClaim("p", {"zeta": 1, "alpha": "a", "mid": 2}, "s")
    assert list(claim.fingerprint) == ["alpha", "mid", "zeta"]
    node = NodeHandshake(node_id, coord_id.public_key(), claim)
    coord = CoordinatorHandshake(coord_id, lambda k: True)
    welcome = coord.receive_hello(node.start())
    # A sender that keeps insertion order: sign and send the fingerprint reversed.
    object.__setattr__(claim, "fingerprint", dict(reversed(list(claim.fingerprint.items()))))
    auth = node.receive_welcome(welcome)
    assert auth.index(b"zeta") < auth.index(b"alpha")
    with pytest.raises(HandshakeError) as err:
        coord.receive_auth(auth)
    assert err.value.code is CloseCode.MALFORMED_MESSAGE
    assert "not canonically encoded" in err.value.reason


def test_claim_too_large_is_local_error(node_id, coord_id):
    """A claim that cannot fit a 2 KiB auth is refused at construction."""
    claim = ProfileClaim("p", {f"k{i}": "x" * 200 for i in range(20)}, "s")
    with pytest.raises(LocalProtocolError):
        NodeHandshake(node_id, coord_id.public_key(), claim)


def test_calls_out_of_order_are_local_errors(node_id, coord_id):
    """Using a handshake out of order raises LocalProtocolError."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    with pytest.raises(LocalProtocolError):
        node.receive_welcome(b"")
    with pytest.raises(LocalProtocolError):
        node.transport()
    coord = CoordinatorHandshake(coord_id, lambda k: True)
    with pytest.raises(LocalProtocolError):
        coord.receive_auth(b"")
    node.start()
    with pytest.raises(LocalProtocolError):
        node.start()


def test_failed_handshake_is_dead(node_id, coord_id):
    """After a HandshakeError every later call raises LocalProtocolError."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    coord = CoordinatorHandshake(coord_id, lambda k: True)
    welcome = coord.receive_hello(node.start())
    with pytest.raises(HandshakeError):
        node.receive_welcome(welcome[:-1] + bytes([welcome[-1] ^ 1]))
    with pytest.raises(LocalProtocolError):
        node.receive_welcome(welcome)
    with pytest.raises(LocalProtocolError):
        node.transport()


@pytest.mark.parametrize(
    "hex_key",
    [
        "0100000000000000000000000000000000000000000000000000000000000000",
        "0000000000000000000000000000000000000000000000000000000000000000",
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
        "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    ],
)
def test_small_order_node_key_refused(node_id, coord_id, hex_key):
    """A hello naming a small-order/non-canonical key is refused (open enrollment too)."""
    hello = NodeHandshake(node_id, coord_id.public_key(), CLAIM).start()
    coord = CoordinatorHandshake(coord_id, lambda k: True)
    with pytest.raises(HandshakeError) as err:
        coord.receive_hello(_edit(hello, node_key=bytes.fromhex(hex_key)))
    assert err.value.code is CloseCode.BAD_HANDSHAKE
    assert "refused" in err.value.reason


def test_identity_key_forgery_refused(node_id, coord_id):
    """The R = identity, S = 0 auth forgery under the identity key never completes."""
    identity = bytes.fromhex("01" + "00" * 31)
    hello = _edit(NodeHandshake(node_id, coord_id.public_key(), CLAIM).start(), node_key=identity)
    coord = CoordinatorHandshake(coord_id, lambda k: True)
    with pytest.raises(HandshakeError):
        coord.receive_hello(hello)


def test_handshake_walks_the_session_table(node_id, coord_id):
    """Both sides' states are the session table's (protocol.states): AWAIT_HELLO ->
    AWAIT_WELCOME / AWAIT_AUTH -> OPEN, and CLOSED after a failure."""
    from netcheck.protocol.states import State

    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    coord = CoordinatorHandshake(coord_id, lambda k: True)
    assert node.state is coord.state is State.AWAIT_HELLO
    hello = node.start()
    assert node.state is State.AWAIT_WELCOME
    welcome = coord.receive_hello(hello)
    assert coord.state is State.AWAIT_AUTH
    coord.receive_auth(node.receive_welcome(welcome))
    assert node.state is coord.state is State.OPEN
    broken = CoordinatorHandshake(coord_id, lambda k: False)
    with pytest.raises(HandshakeError):
        broken.receive_hello(NodeHandshake(node_id, coord_id.public_key(), CLAIM).start())
    assert broken.state is State.CLOSED
