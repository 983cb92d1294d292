"""The compute probe messages (docs/protocol.md §5.9): schema, limits, direction rules,
states, and the known answer they carry (netcheck/engines/probe.py)."""

from __future__ import annotations

import hashlib

import msgpack
import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from netcheck.engines import probe
from netcheck.errors import CloseCode, LocalProtocolError, MessageError
from netcheck.protocol import Role, State, Transport, decode_message, encode_message, next_state
from netcheck.protocol.messages import FRAME_TYPES, Probe, ProbeReply
from netcheck.protocol.states import SENDERS, TRANSITIONS, sends

K_NC, K_CN, SID = bytes(range(32)), bytes(range(32, 64)), bytes(range(16))
ACTIVE = (State.OPEN, State.JOB_OFFERED, State.JOB_PENDING, State.RUNNING)


def pair() -> tuple[Transport, Transport]:
    node = Transport(Role.NODE, K_NC, K_CN, SID)
    coordinator = Transport(Role.COORDINATOR, K_CN, K_NC, SID)
    return node, coordinator


def test_probe_round_trip_and_layout():
    """probe/probe_reply encode as typed maps in field order and decode back."""
    msg = Probe(nonce=5, challenge=bytes(range(32)))
    raw = msgpack.unpackb(encode_message(msg), raw=False)
    assert list(raw) == ["t", "nonce", "challenge"] and raw["t"] == "probe"
    assert decode_message(encode_message(msg)) == msg
    reply = ProbeReply(nonce=5, answer=bytes(32))
    assert list(msgpack.unpackb(encode_message(reply), raw=False)) == ["t", "nonce", "answer"]
    assert decode_message(encode_message(reply)) == reply
    assert {"probe", "probe_reply"} <= FRAME_TYPES


@pytest.mark.parametrize(
    "build",
    [
        lambda: Probe(-1, bytes(32)),
        lambda: Probe(2**63, bytes(32)),
        lambda: Probe(True, bytes(32)),
        lambda: Probe(1, bytes(31)),
        lambda: Probe(1, bytes(33)),
        lambda: Probe(1, bytearray(32)),
        lambda: Probe(1, "x" * 32),
        lambda: ProbeReply(-1, bytes(32)),
        lambda: ProbeReply(1, bytes(0)),
        lambda: ProbeReply(1, bytes(64)),
        lambda: ProbeReply(1.0, bytes(32)),
    ],
)
def test_probe_field_limits(build):
    """Nonces in [0, 2**63) (never bool), challenge and answer exactly 32 bytes."""
    with pytest.raises(MessageError) as err:
        build()
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


@pytest.mark.parametrize(
    "obj",
    [
        {"t": "probe", "nonce": 1},
        {"t": "probe", "nonce": 1, "challenge": bytes(32), "answer": bytes(32)},
        {"t": "probe", "nonce": 1, "challenge": "00" * 32},
        {"t": "probe_reply", "nonce": 1, "answer": bytes(31)},
        {"t": "probe_reply", "answer": bytes(32)},
    ],
)
def test_probe_schema_violations_on_the_wire(obj):
    """Missing, extra or mistyped fields are MALFORMED_MESSAGE."""
    with pytest.raises(MessageError) as err:
        decode_message(msgpack.packb(obj, use_bin_type=True))
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


def test_probe_direction_rules():
    """Only the coordinator sends probe; only the node sends probe_reply."""
    assert SENDERS["probe"] == frozenset({Role.COORDINATOR})
    assert SENDERS["probe_reply"] == frozenset({Role.NODE})
    assert sends(Role.COORDINATOR, "probe") and not sends(Role.NODE, "probe")
    assert sends(Role.NODE, "probe_reply") and not sends(Role.COORDINATOR, "probe_reply")
    node, coord = pair()
    with pytest.raises(LocalProtocolError):
        node.seal(Probe(1, bytes(32)))
    with pytest.raises(LocalProtocolError):
        coord.seal(ProbeReply(1, bytes(32)))
    assert node.open(coord.seal(Probe(1, bytes(32)))) == Probe(1, bytes(32))
    assert coord.open(node.seal(ProbeReply(1, bytes(32)))) == ProbeReply(1, bytes(32))


def _frame(key: bytes, direction: int, msg: Probe | ProbeReply) -> bytes:
    """A data frame with counter 0 sealed by hand (any message, either direction)."""
    ctr = (0).to_bytes(8, "big")
    aad = SID + bytes([direction]) + ctr + b"\x01"
    return b"\x01" + ctr + ChaCha20Poly1305(key).encrypt(bytes(4) + ctr, encode_message(msg), aad)


def test_probe_from_the_wrong_side_is_unexpected():
    """A validly encrypted probe from the node, or probe_reply from the coordinator, is
    UNEXPECTED_MESSAGE (§3.4, §6.1)."""
    node, coord = pair()
    with pytest.raises(MessageError) as err:
        coord.open(_frame(K_NC, 0, Probe(1, bytes(32))))
    assert err.value.code is CloseCode.UNEXPECTED_MESSAGE
    with pytest.raises(MessageError) as err:
        node.open(_frame(K_CN, 1, ProbeReply(1, bytes(32))))
    assert err.value.code is CloseCode.UNEXPECTED_MESSAGE


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("state", ACTIVE)
@pytest.mark.parametrize("msg_type", ["probe", "probe_reply"])
def test_probe_legal_while_open_or_job_in_flight(role, state, msg_type):
    """probe and probe_reply leave OPEN and every job state unchanged."""
    assert next_state(role, state, msg_type) is state


@pytest.mark.parametrize(
    "state", [State.AWAIT_HELLO, State.AWAIT_WELCOME, State.AWAIT_AUTH, State.CLOSED]
)
@pytest.mark.parametrize("msg_type", ["probe", "probe_reply"])
def test_probe_illegal_in_handshake_and_closed(state, msg_type):
    """Before the session is open, or after bye, a probe is UNEXPECTED_MESSAGE."""
    assert (Role.NODE, state, msg_type) not in TRANSITIONS
    with pytest.raises(MessageError) as err:
        next_state(Role.COORDINATOR, state, msg_type)
    assert err.value.code is CloseCode.UNEXPECTED_MESSAGE


# --- the known answer (netcheck/engines/probe.py) ---------------------------------------


def test_answer_matches_the_documented_definition():
    """answer() is SHA-256 over the int16 LE bytes of W2 @ clamp(W1 @ X, -1, 1)."""
    challenge = bytes(range(32))
    stream = hashlib.shake_256(b"netcheck/1 probe\0" + challenge).digest(3 * 64 * 64)
    vals = np.array([b % 3 - 1 for b in stream], dtype=np.int64)
    x, w1, w2 = (vals[i * 4096 : (i + 1) * 4096].reshape(64, 64) for i in range(3))
    y = w2 @ np.clip(w1 @ x, -1, 1)
    want = hashlib.sha256(b"netcheck/1 probe answer\0" + y.astype("<i2").tobytes()).digest()
    assert probe.answer(challenge) == want
    assert len(want) == 32 and probe.answer(bytes(32)) != want


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_answer_is_exact_in_low_precision(dtype):
    """The integer MLP is exact in float16/float32, so any device gives the same bytes."""
    for seed in range(5):
        challenge = bytes([seed]) * 32
        x, w1, w2 = (m.astype(dtype) for m in probe.operands(challenge))
        h = np.clip(w1 @ x, -1, 1)
        assert probe.digest(w2 @ h) == probe.answer(challenge)


def test_answer_rejects_bad_challenges_and_results():
    """Challenges are exactly 32 bytes; results must be 64x64 integers in [-64, 64]."""
    with pytest.raises(ValueError):
        probe.answer(bytes(31))
    with pytest.raises(ValueError):
        probe.digest(np.zeros((64, 63)))
    with pytest.raises(ValueError):
        probe.digest(np.full((64, 64), 0.5))
    with pytest.raises(ValueError):
        probe.digest(np.full((64, 64), 65))


def test_batched_answers_equal_single_answers():
    """probe.answers (stacked float32 matmul) gives exactly probe.answer for each
    challenge, including all-zero and all-0xff streams' seeds, and checks sizes."""
    challenges = [bytes(32), b"\xff" * 32, *(bytes([i]) * 32 for i in range(1, 40))]
    assert probe.answers(challenges) == [probe.answer(c) for c in challenges]
    assert probe.answers([]) == []
    with pytest.raises(ValueError, match="32 bytes"):
        probe.answers([bytes(31)])
