"""One named test per attack of docs/protocol.md §9: each must be stopped."""

from __future__ import annotations

import dataclasses
import time
import tracemalloc

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from protocol_support import CLAIM, seeded

from netcheck.errors import (
    CloseCode,
    FrameError,
    HandshakeError,
    LocalProtocolError,
    MessageError,
)
from netcheck.keys import public_key_bytes
from netcheck.protocol import (
    Ack,
    Auth,
    CoordinatorHandshake,
    Echo,
    EchoReply,
    NodeHandshake,
    Role,
    Transport,
    Welcome,
    decode_message,
    encode_message,
    sign_receipt,
    verify_receipt,
)
from netcheck.protocol.handshake import (
    COORDINATOR_LABEL,
    NODE_LABEL,
    PROLOGUE_LABEL,
    SUITE,
    TRAFFIC_INFO,
    Transcript,
)
from netcheck.protocol.jobs import COMMITMENT_LABEL, JOB_LABEL, RECEIPT_LABEL

LOW_ORDER_POINTS = [
    bytes(32),  # 0
    bytes([1]) + bytes(31),  # 1
    bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
    bytes.fromhex("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157"),
    bytes.fromhex("ec" + "ff" * 30 + "7f"),  # p - 1
    bytes.fromhex("ed" + "ff" * 30 + "7f"),  # p
    bytes.fromhex("ee" + "ff" * 30 + "7f"),  # p + 1
]


def _edit(data: bytes, **changes: object) -> bytes:
    return encode_message(dataclasses.replace(decode_message(data), **changes))


def _signed_welcome(
    signer: Ed25519PrivateKey, hello: bytes, coordinator_key: bytes, ephemeral: bytes
) -> bytes:
    """A welcome built by an attacker: any ephemeral, signed by ``signer`` over the
    transcript the node expects (the prologue names ``coordinator_key``)."""
    transcript = Transcript("/v1/ws", coordinator_key)
    transcript.mix(hello)
    unsigned = Welcome(
        "netcheck/1",
        SUITE,
        ephemeral,
        bytes(32),
        coordinator_key,
        bytes(64),
    )
    th2 = transcript.mix(encode_message(unsigned, omit=("signature",)))
    welcome = dataclasses.replace(unsigned, signature=signer.sign(COORDINATOR_LABEL + th2))
    return encode_message(welcome)


def _code(exc_info: pytest.ExceptionInfo) -> CloseCode:
    return exc_info.value.code


# --- frames ---------------------------------------------------------------------------


@pytest.mark.parametrize("position", [0, 8, 9, 12, -17, -1])
def test_tampered_frame(connect, position):
    """A bit flipped in the ciphertext or tag is DECRYPT_FAILED; in the counter, a
    counter mismatch; in the type byte, a protocol error."""
    pair = connect()
    frame = bytearray(pair.node_transport.seal(Ack("r1")))
    frame[position] ^= 0x01
    with pytest.raises(FrameError) as err:
        pair.coordinator_transport.open(bytes(frame))
    expected = {0: CloseCode.PROTOCOL_ERROR, 8: CloseCode.COUNTER_MISMATCH}
    assert _code(err) is expected.get(position, CloseCode.DECRYPT_FAILED)


def test_frame_replay(connect):
    """A frame delivered twice is COUNTER_MISMATCH the second time."""
    pair = connect()
    frame = pair.node_transport.seal(Ack("r1"))
    pair.coordinator_transport.open(frame)
    with pytest.raises(FrameError) as err:
        pair.coordinator_transport.open(frame)
    assert _code(err) is CloseCode.COUNTER_MISMATCH


def test_frame_reorder(connect):
    """Frames delivered out of order are COUNTER_MISMATCH."""
    pair = connect()
    first, second = (pair.coordinator_transport.seal(Echo(i)) for i in range(2))
    with pytest.raises(FrameError) as err:
        pair.node_transport.open(second)
    assert _code(err) is CloseCode.COUNTER_MISMATCH


def test_frame_drop(connect):
    """A dropped frame makes the next one COUNTER_MISMATCH."""
    pair = connect()
    frames = [pair.coordinator_transport.seal(Echo(i)) for i in range(3)]
    assert pair.node_transport.open(frames[0]) == Echo(0)
    with pytest.raises(FrameError) as err:
        pair.node_transport.open(frames[2])
    assert _code(err) is CloseCode.COUNTER_MISMATCH


def test_frame_counter_rewritten(connect):
    """Rewriting a frame's counter to the expected value fails authentication."""
    pair = connect()
    pair.node_transport.seal(Ack("r1"))  # dropped
    second = pair.node_transport.seal(Ack("r2"))
    forged = second[:1] + (0).to_bytes(8, "big") + second[9:]
    with pytest.raises(FrameError) as err:
        pair.coordinator_transport.open(forged)
    assert _code(err) is CloseCode.DECRYPT_FAILED


def test_truncated_frame(connect):
    """A frame cut short in flight is DECRYPT_FAILED."""
    pair = connect()
    frame = pair.node_transport.seal(Ack("r1"))
    with pytest.raises(FrameError) as err:
        pair.coordinator_transport.open(frame[:-1])
    assert _code(err) is CloseCode.DECRYPT_FAILED


def test_frame_from_other_session(connect):
    """A frame from another session between the same parties is DECRYPT_FAILED."""
    one, two = connect(), connect()
    frame = one.coordinator_transport.seal(Echo(1))
    with pytest.raises(FrameError) as err:
        two.node_transport.open(frame)
    assert _code(err) is CloseCode.DECRYPT_FAILED


@pytest.mark.parametrize("side", ["node", "coordinator"])
def test_reflection(connect, side):
    """A party's own frame sent back to it is DECRYPT_FAILED."""
    pair = connect()
    transport = pair.node_transport if side == "node" else pair.coordinator_transport
    frame = transport.seal(EchoReply(1) if side == "node" else Echo(1))
    with pytest.raises(FrameError) as err:
        transport.open(frame)
    assert _code(err) is CloseCode.DECRYPT_FAILED


def test_counter_exhaustion_sender(connect):
    """After max_counter frames the sender refuses to seal."""
    pair = connect(max_counter=3)
    for i in range(3):
        pair.node_transport.open(pair.coordinator_transport.seal(Echo(i)))
    with pytest.raises(LocalProtocolError):
        pair.coordinator_transport.seal(Echo(3))


def test_counter_exhaustion_receiver():
    """A receiver that accepted max_counter frames rejects the next: COUNTER_EXHAUSTED."""
    k1, k2, sid = bytes(32), bytes([1]) * 32, bytes(16)
    sender = Transport(Role.NODE, k1, k2, sid)  # a peer ignoring the limit
    receiver = Transport(Role.COORDINATOR, k2, k1, sid, max_counter=2)
    for _ in range(2):
        receiver.open(sender.seal(Ack("r")))
    with pytest.raises(FrameError) as err:
        receiver.open(sender.seal(Ack("r")))
    assert _code(err) is CloseCode.COUNTER_EXHAUSTED


def test_oversized_frame(connect):
    """A frame over max_message_bytes + 25 is MESSAGE_TOO_LARGE before decryption."""
    pair = connect()
    limit = 8 * 1024 * 1024
    with pytest.raises(FrameError) as err:
        pair.coordinator_transport.open(b"\x01" + bytes(8) + bytes(limit + 17))
    assert _code(err) is CloseCode.MESSAGE_TOO_LARGE


def test_oversized_handshake_message(coord_id):
    """A hello over 2 KiB is MESSAGE_TOO_LARGE."""
    with pytest.raises(HandshakeError) as err:
        CoordinatorHandshake(coord_id, lambda k: True).receive_hello(b"\x80" * 2049)
    assert _code(err) is CloseCode.MESSAGE_TOO_LARGE


# --- malicious encodings ------------------------------------------------------------------


@pytest.mark.parametrize("depth", [9, 100, 100_000])
def test_deeply_nested_message(depth):
    """Arrays nested deeper than max_depth (8) are MALFORMED_MESSAGE."""
    data = b"\x91" * (depth - 1) + b"\x90"
    with pytest.raises(MessageError) as err:
        decode_message(data)
    assert _code(err) is CloseCode.MALFORMED_MESSAGE


def test_deeply_nested_message_in_frame(connect):
    """A deeply nested field inside an authentic frame is MALFORMED_MESSAGE."""
    pair = connect()
    # A bye whose reason is a deep array: valid msgpack, valid frame, bad message.
    plaintext = b"\x82\xa1t\xa3bye\xa6reason" + b"\x91" * 20 + b"\x90"
    transport = pair.node_transport
    # Seal by hand with the node's own sealing key so the coordinator can open it.
    frame = transport._seal_aead.encrypt(
        bytes(12), plaintext, pair.accepted.session_id + b"\x00" + bytes(8) + b"\x01"
    )
    with pytest.raises(MessageError) as err:
        pair.coordinator_transport.open(b"\x01" + bytes(8) + frame)
    assert _code(err) is CloseCode.MALFORMED_MESSAGE


def _empty_maps(total: int) -> bytes:
    """About ``total`` bytes of msgpack: arrays of 65535 empty maps in one array."""
    inner = b"\xdc\xff\xff" + b"\x80" * 65535
    count = total // len(inner)
    return b"\xdc" + count.to_bytes(2, "big") + inner * count


def test_amplifying_empty_maps_rejected_quickly():
    """4 MiB of empty maps is refused within seconds (object budget), not expanded."""
    data = _empty_maps(4 * 1024 * 1024)
    started = time.perf_counter()
    with pytest.raises(MessageError) as err:
        decode_message(data)
    assert time.perf_counter() - started < 5.0
    assert _code(err) is CloseCode.MALFORMED_MESSAGE


def test_amplifying_empty_maps_memory_bounded():
    """Refusing 4 MiB of empty maps peaks well under the ~290 MiB of a full expansion."""
    data = _empty_maps(4 * 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(MessageError):
            decode_message(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 128 * 1024 * 1024


def test_duplicate_map_keys():
    """A map with a repeated key is MALFORMED_MESSAGE (no last-one-wins)."""
    data = b"\x83\xa1t\xa3ack\xa8round_id\xa1a\xa8round_id\xa1b"
    with pytest.raises(MessageError) as err:
        decode_message(data)
    assert _code(err) is CloseCode.MALFORMED_MESSAGE


# --- handshake ----------------------------------------------------------------------------


def test_handshake_replay_to_coordinator(connect, coord_id):
    """Replaying a recorded hello and auth to a new coordinator session: BAD_SIGNATURE."""
    old = connect()
    coordinator = CoordinatorHandshake(coord_id, lambda k: True)
    coordinator.receive_hello(old.hello)  # fresh ephemeral and nonce in the new welcome
    with pytest.raises(HandshakeError) as err:
        coordinator.receive_auth(old.auth)
    assert _code(err) is CloseCode.BAD_SIGNATURE


def test_handshake_replay_to_node(connect, node_id, coord_id):
    """Replaying a recorded welcome to a new node session: BAD_SIGNATURE."""
    old = connect()
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    node.start()
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(old.welcome)
    assert _code(err) is CloseCode.BAD_SIGNATURE


def test_downgrade_version_list_edited(node_id, coord_id):
    """Editing the offered versions in flight breaks the signed transcript."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    hello = _edit(node.start(), versions=("netcheck/0", "netcheck/1"))
    welcome = CoordinatorHandshake(coord_id, lambda k: True).receive_hello(hello)
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(welcome)
    assert _code(err) is CloseCode.BAD_SIGNATURE


def test_downgrade_suite_list_edited(node_id, coord_id):
    """Editing the offered suites in flight breaks the signed transcript too."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    hello = node.start()
    suites = decode_message(hello).suites
    welcome = CoordinatorHandshake(coord_id, lambda k: True).receive_hello(
        _edit(hello, suites=(*suites, "weak-suite"))
    )
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(welcome)
    assert _code(err) is CloseCode.BAD_SIGNATURE


def test_unknown_key_share_node_identity_swapped(node_id, coord_id):
    """M swaps its own (admitted) key into N's hello: N refuses C's welcome, so C never
    shares a key with N while believing it talks to M."""
    mallory = Ed25519PrivateKey.generate()
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    hello = _edit(node.start(), node_key=public_key_bytes(mallory))
    welcome = CoordinatorHandshake(coord_id, lambda k: True).receive_hello(hello)
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(welcome)
    assert _code(err) is CloseCode.BAD_SIGNATURE


def test_unknown_key_share_auth_under_other_identity(node_id, coord_id):
    """N's auth signature does not verify for a session opened under M's identity."""
    mallory = Ed25519PrivateKey.generate()
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    honest_coord = CoordinatorHandshake(coord_id, lambda k: True, random_bytes=seeded(5))
    hello = node.start()
    auth = node.receive_welcome(honest_coord.receive_hello(hello))
    # C, in a parallel session with the same ephemeral randomness, saw M's key.
    swapped = CoordinatorHandshake(coord_id, lambda k: True, random_bytes=seeded(5))
    swapped.receive_hello(_edit(hello, node_key=public_key_bytes(mallory)))
    with pytest.raises(HandshakeError) as err:
        swapped.receive_auth(auth)
    assert _code(err) is CloseCode.BAD_SIGNATURE


def test_kci_node_key_cannot_sign_as_coordinator(node_id, coord_id):
    """With N's private key, an attacker still cannot make a welcome N accepts."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    hello = node.start()
    ephemeral = X25519PrivateKey.generate().public_key().public_bytes_raw()
    welcome = _signed_welcome(node_id, hello, public_key_bytes(coord_id), ephemeral)
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(welcome)
    assert _code(err) is CloseCode.BAD_SIGNATURE


def test_kci_node_key_as_coordinator_identity(node_id, coord_id):
    """Presenting N's own key as the coordinator identity is WRONG_COORDINATOR_KEY."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    hello = node.start()
    ephemeral = X25519PrivateKey.generate().public_key().public_bytes_raw()
    welcome = _signed_welcome(node_id, hello, public_key_bytes(node_id), ephemeral)
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(welcome)
    assert _code(err) is CloseCode.WRONG_COORDINATOR_KEY


@pytest.mark.parametrize("point", LOW_ORDER_POINTS, ids=lambda p: p[:4].hex())
def test_low_order_point_to_coordinator(node_id, coord_id, point):
    """A hello with a low-order X25519 ephemeral is BAD_HANDSHAKE."""
    hello = _edit(NodeHandshake(node_id, coord_id.public_key(), CLAIM).start(), ephemeral=point)
    with pytest.raises(HandshakeError) as err:
        CoordinatorHandshake(coord_id, lambda k: True).receive_hello(hello)
    assert _code(err) is CloseCode.BAD_HANDSHAKE


@pytest.mark.parametrize("point", LOW_ORDER_POINTS[:2], ids=lambda p: p[:4].hex())
def test_low_order_point_to_node(node_id, coord_id, point):
    """A correctly signed welcome with a low-order ephemeral is BAD_HANDSHAKE."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    hello = node.start()
    welcome = _signed_welcome(coord_id, hello, public_key_bytes(coord_id), point)
    with pytest.raises(HandshakeError) as err:
        node.receive_welcome(welcome)
    assert _code(err) is CloseCode.BAD_HANDSHAKE


def test_signature_reuse_across_contexts(connect, node_id, coord_id):
    """Signing labels are prefix-free; a receipt signature is refused as an auth
    signature and an auth signature does not verify as a receipt."""
    labels = [
        PROLOGUE_LABEL,
        COORDINATOR_LABEL,
        NODE_LABEL,
        TRAFFIC_INFO,
        JOB_LABEL,
        COMMITMENT_LABEL,
        RECEIPT_LABEL,
    ]
    assert len(set(labels)) == len(labels)
    signing = [COORDINATOR_LABEL, NODE_LABEL, RECEIPT_LABEL]
    assert all(a == b or not b.startswith(a) for a in signing for b in signing)

    pair = connect()
    session_id = pair.accepted.session_id
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    coordinator = CoordinatorHandshake(coord_id, lambda k: True)
    node.receive_welcome(coordinator.receive_hello(node.start()))
    receipt_sig = sign_receipt(node_id, session_id, "r1", bytes(32))
    with pytest.raises(HandshakeError) as err:
        coordinator.receive_auth(encode_message(Auth(signature=receipt_sig, claim=CLAIM)))
    assert _code(err) is CloseCode.BAD_SIGNATURE
    auth_sig = decode_message(pair.auth).signature
    assert not verify_receipt(public_key_bytes(node_id), auth_sig, session_id, "r1", bytes(32))


# --- key update (§3.5) ----------------------------------------------------------------------


def test_forged_key_update(connect):
    """Turning a data frame into a key update (type 0x01 -> 0x02) is DECRYPT_FAILED: the
    type byte is in the AAD, so an attacker cannot desynchronise the keys."""
    pair = connect()
    frame = pair.node_transport.seal(Ack("r1"))
    with pytest.raises(FrameError) as err:
        pair.coordinator_transport.open(b"\x02" + frame[1:])
    assert _code(err) is CloseCode.DECRYPT_FAILED


def test_stripped_key_update(connect):
    """Turning a key update into a data frame (0x02 -> 0x01) is DECRYPT_FAILED."""
    pair = connect()
    pair.node_transport.request_key_update()
    frame = pair.node_transport.seal(Ack("r1"))
    assert frame[0] == 0x02
    with pytest.raises(FrameError) as err:
        pair.coordinator_transport.open(b"\x01" + frame[1:])
    assert _code(err) is CloseCode.DECRYPT_FAILED


def test_old_key_refused_after_key_update():
    """After a key update, a frame sealed under the previous key is DECRYPT_FAILED, even
    with the expected counter."""
    k1, k2, sid = bytes(32), bytes([1]) * 32, bytes(16)
    sender = Transport(Role.NODE, k1, k2, sid, rekey_frames=2)
    stale = Transport(Role.NODE, k1, k2, sid)  # never updates: keeps the old key
    receiver = Transport(Role.COORDINATOR, k2, k1, sid)
    for _ in range(2):
        receiver.open(sender.seal(Ack("r")))  # the second frame is the key update
    old = [stale.seal(Ack("r")) for _ in range(3)][2]  # counter 2, old key
    with pytest.raises(FrameError) as err:
        receiver.open(old)
    assert _code(err) is CloseCode.DECRYPT_FAILED


def test_key_update_from_other_session(connect):
    """A key-update frame from another session is DECRYPT_FAILED and ratchets nothing."""
    one, two = connect(), connect()
    one.coordinator_transport.request_key_update()
    with pytest.raises(FrameError) as err:
        two.node_transport.open(one.coordinator_transport.seal(Echo(1)))
    assert _code(err) is CloseCode.DECRYPT_FAILED
    assert two.node_transport.statistics()["key_updates_received"] == 0


@pytest.mark.parametrize("side", ["node", "coordinator"])
def test_reflection_of_handshake_message(node_id, coord_id, side):
    """A party's own handshake message sent back to it is UNEXPECTED_MESSAGE."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    coordinator = CoordinatorHandshake(coord_id, lambda k: True)
    hello = node.start()
    welcome = coordinator.receive_hello(hello)
    with pytest.raises(HandshakeError) as err:
        if side == "node":
            node.receive_welcome(hello)
        else:
            coordinator.receive_auth(welcome)
    assert _code(err) is CloseCode.UNEXPECTED_MESSAGE


def test_reflection_of_hello_to_coordinator(node_id, coord_id):
    """A coordinator's welcome replayed to it as a first message is UNEXPECTED_MESSAGE."""
    node = NodeHandshake(node_id, coord_id.public_key(), CLAIM)
    welcome = CoordinatorHandshake(coord_id, lambda k: True).receive_hello(node.start())
    with pytest.raises(HandshakeError) as err:
        CoordinatorHandshake(coord_id, lambda k: True).receive_hello(welcome)
    assert _code(err) is CloseCode.UNEXPECTED_MESSAGE
