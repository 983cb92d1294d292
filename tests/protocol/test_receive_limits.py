"""Per-session receive limits: the coordinator tightens them to the node's profile."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from protocol_support import make_pair

from netcheck.errors import CloseCode, FrameError, LocalProtocolError
from netcheck.protocol.codec import DEFAULT_LIMITS, Limits
from netcheck.protocol.messages import Result


def result(rows: int, tokens: int) -> Result:
    outputs = tuple((7,) * tokens for _ in range(rows))
    return Result("r1", outputs, bytes(32), bytes(64))


def test_tightened_limits_refuse_big_frame_before_decryption() -> None:
    """After limit_receive, a frame above the new size cap fails with MESSAGE_TOO_LARGE."""
    pair = make_pair(Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate())
    pair.accepted.transport.limit_receive(Limits(max_message_bytes=2048))
    ok = pair.node_transport.seal(result(4, 4))
    assert isinstance(pair.accepted.transport.open(ok), Result)
    big = pair.node_transport.seal(result(30, 1000))
    with pytest.raises(FrameError) as info:
        pair.accepted.transport.open(big)
    assert info.value.code is CloseCode.MESSAGE_TOO_LARGE


def test_limits_can_only_tighten() -> None:
    """Loosening a receive limit is a local error."""
    pair = make_pair(Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate())
    looser = Limits(max_objects=DEFAULT_LIMITS.max_objects + 1)
    with pytest.raises(LocalProtocolError):
        pair.accepted.transport.limit_receive(looser)


def test_profile_limits_admit_a_full_result() -> None:
    """receive_limits(profile) admits exactly a B x max_new_tokens result."""
    from netcheck.config import DeadlineParams, Profile
    from netcheck.coordinator.session import receive_limits

    prof = Profile(
        name="p", engine="torch", model="synth:tiny", dtype="float32", batch_size=240,
        prompt_len=128, max_new_tokens=64, deadline=DeadlineParams(t_ref_s=1.0),
    )  # fmt: skip
    pair = make_pair(Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate())
    pair.accepted.transport.limit_receive(receive_limits(prof))
    biggest = Result("r1", tuple((2**31 - 1,) * 64 for _ in range(240)), bytes(32), bytes(64))
    assert isinstance(pair.accepted.transport.open(pair.node_transport.seal(biggest)), Result)
