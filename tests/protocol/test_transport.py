"""Encrypted transport frames: layout, direction rules, limits, permanent failure."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from netcheck.errors import CloseCode, FrameError, LocalProtocolError, MessageError
from netcheck.protocol import (
    Ack,
    Bye,
    Echo,
    EchoReply,
    Error,
    Hello,
    Job,
    Limits,
    Release,
    Result,
    Role,
    Transport,
    encode_message,
)

K_NC, K_CN, SID = bytes(range(32)), bytes(range(32, 64)), bytes(range(16))


def make(**kwargs) -> tuple[Transport, Transport]:
    """A node and a coordinator transport sharing fixed keys."""
    node = Transport(Role.NODE, K_NC, K_CN, SID, **kwargs)
    coordinator = Transport(Role.COORDINATOR, K_CN, K_NC, SID, **kwargs)
    return node, coordinator


def raw_frame(
    plaintext: bytes, *, counter: int = 0, key: bytes = K_NC, direction: int = 0, ftype: int = 1
):
    """A frame built by hand from any plaintext (node -> coordinator by default)."""
    ctr = counter.to_bytes(8, "big")
    aad = SID + bytes([direction]) + ctr + bytes([ftype])
    sealed = ChaCha20Poly1305(key).encrypt(bytes(4) + ctr, plaintext, aad)
    return bytes([ftype]) + ctr + sealed


def test_round_trip_both_directions():
    """Frames sealed by one side open on the other, in order, both ways."""
    node, coord = make()
    for i in range(3):
        assert node.open(coord.seal(Echo(i))) == Echo(i)
        assert coord.open(node.seal(EchoReply(i))) == EchoReply(i)


def test_frame_layout():
    """A frame is type 0x01, an 8-byte big-endian counter, then ciphertext and tag."""
    node, coord = make()
    node.seal(Ack("r1"))
    frame = node.seal(Ack("r1"))
    assert frame[0] == 0x01
    assert frame[1:9] == (1).to_bytes(8, "big")
    assert len(frame) == 9 + len(encode_message(Ack("r1"))) + 16
    assert frame == raw_frame(encode_message(Ack("r1")), counter=1)


def test_every_job_message_crosses():
    """Job, Release, Bye go to the node; Ack, Result, Error, Bye to the coordinator."""
    node, coord = make()
    to_node = [
        Job("r1", bytes(12), bytes(16), 2, 4, 1.5),
        Release("r1", bytes(32)),
        Bye("done"),
    ]
    to_coord = [Ack("r1"), Result("r1", ((1, 2), (3, 4)), bytes(32), bytes(64)), Error("r1", "x")]
    assert [node.open(coord.seal(m)) for m in to_node] == to_node
    assert [coord.open(node.seal(m)) for m in to_coord] == to_coord


def test_statistics():
    """statistics() counts frames and bytes in each direction."""
    node, coord = make(max_counter=10)
    frame = node.seal(Ack("r"))
    coord.open(frame)
    assert node.statistics() == {
        "frames_sent": 1,
        "frames_received": 0,
        "bytes_sent": len(frame),
        "bytes_received": 0,
        "frames_left_to_send": 9,
        "key_updates_sent": 0,
        "key_updates_received": 0,
    }
    assert coord.statistics()["frames_received"] == 1
    assert coord.statistics()["bytes_received"] == len(frame)


def test_seal_refuses_handshake_messages():
    """Sealing a handshake message is a local error."""
    node, _ = make()
    hello = Hello(("netcheck/1",), ("s",), bytes(32), bytes(32), bytes(32), bytes(32))
    with pytest.raises(LocalProtocolError):
        node.seal(hello)


def test_seal_refuses_other_roles_messages():
    """A node cannot seal a Job; a coordinator cannot seal a Result."""
    node, coord = make()
    with pytest.raises(LocalProtocolError):
        node.seal(Job("r1", bytes(12), bytes(16), 2, 4, 1.5))
    with pytest.raises(LocalProtocolError):
        coord.seal(Ack("r1"))


def test_open_refuses_message_peer_may_not_send():
    """A validly encrypted Job from the node is UNEXPECTED_MESSAGE."""
    _, coord = make()
    job = Job("r1", bytes(12), bytes(16), 2, 4, 1.5)
    with pytest.raises(MessageError) as err:
        coord.open(raw_frame(encode_message(job)))
    assert err.value.code is CloseCode.UNEXPECTED_MESSAGE


def test_handshake_message_inside_frame():
    """A hello inside a frame is UNEXPECTED_MESSAGE."""
    _, coord = make()
    hello = Hello(("netcheck/1",), ("s",), bytes(32), bytes(32), bytes(32), bytes(32))
    with pytest.raises(MessageError) as err:
        coord.open(raw_frame(encode_message(hello)))
    assert err.value.code is CloseCode.UNEXPECTED_MESSAGE


def test_malformed_plaintext():
    """A frame that decrypts to garbage is MALFORMED_MESSAGE."""
    _, coord = make()
    with pytest.raises(MessageError) as err:
        coord.open(raw_frame(b"\xc1"))
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


@pytest.mark.parametrize("ftype", [0x00, 0x03, 0x80, 0xFF])
def test_unknown_frame_type(ftype):
    """A frame type other than 0x01 (data) and 0x02 (key update) is PROTOCOL_ERROR."""
    node, coord = make()
    frame = node.seal(Ack("r"))
    with pytest.raises(FrameError) as err:
        coord.open(bytes([ftype]) + frame[1:])
    assert err.value.code is CloseCode.PROTOCOL_ERROR


@pytest.mark.parametrize("length", [0, 1, 9, 24])
def test_truncated_frame(length):
    """A frame too short to hold header and tag is DECRYPT_FAILED."""
    node, coord = make()
    with pytest.raises(FrameError) as err:
        coord.open(node.seal(Ack("r"))[:length])
    assert err.value.code is CloseCode.DECRYPT_FAILED


def test_failure_is_permanent():
    """After a rejected frame, even valid frames fail with the same class and code."""
    node, coord = make()
    good = [node.seal(Ack("r")) for _ in range(2)]
    with pytest.raises(FrameError):
        coord.open(good[1])
    assert coord.failed
    for frame in good:
        with pytest.raises(FrameError) as err:
            coord.open(frame)
        assert err.value.code is CloseCode.COUNTER_MISMATCH
    with pytest.raises(LocalProtocolError):
        coord.seal(Echo(1))


def test_message_failure_is_permanent():
    """A MessageError also kills the transport; later calls raise MessageError."""
    node, coord = make()
    with pytest.raises(MessageError):
        coord.open(raw_frame(b"\xc1"))
    with pytest.raises(MessageError) as err:
        coord.open(raw_frame(encode_message(Ack("r")), counter=1))
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


def test_seal_refuses_oversized_message():
    """Sealing a message larger than the limit is a local error."""
    _, coord = make(limits=Limits(max_message_bytes=100))
    with pytest.raises(LocalProtocolError):
        coord.seal(Job("r1", bytes(12), bytes(200), 2, 4, 1.5))


@pytest.mark.parametrize(
    "args",
    [
        (bytes(31), bytes(32), bytes(16)),
        (bytes(32), bytes(33), bytes(16)),
        (bytes(32), bytes(32), bytes(15)),
    ],
)
def test_constructor_checks_sizes(args):
    """Keys must be 32 bytes and the session id 16."""
    with pytest.raises(LocalProtocolError):
        Transport(Role.NODE, *args)


@pytest.mark.parametrize("limit", [0, 2**64 + 1])
def test_constructor_checks_counter_limit(limit):
    """max_counter must be in (0, 2**64]."""
    with pytest.raises(LocalProtocolError):
        Transport(Role.NODE, K_NC, K_CN, SID, max_counter=limit)
