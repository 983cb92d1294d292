"""A claim's software and fingerprint strings are stored and shown by the coordinator:
control characters and bidi overrides are refused at validation, naming the field
(docs/protocol.md §2.4), as node names are in configs."""

from __future__ import annotations

import pytest

from netcheck.errors import CloseCode, MessageError
from netcheck.protocol.codec import decode_message, encode_message
from netcheck.protocol.messages import Auth, ProfileClaim

BAD = ["\n", "\r", "\x1b", "\x00", "\x7f", "\x85", "\t"]
BIDI = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}


@pytest.mark.parametrize("char", BAD + BIDI, ids=lambda c: f"U+{ord(c):04X}")
def test_software_with_a_control_or_bidi_character_is_refused(char: str) -> None:
    with pytest.raises(MessageError) as err:
        ProfileClaim("p", FP, f"netcheck/1.0{char}x")
    assert err.value.code is CloseCode.MALFORMED_MESSAGE
    assert err.value.reason.startswith("profile_claim.software: ")
    assert f"U+{ord(char):04X}" in err.value.reason


@pytest.mark.parametrize("char", BAD + BIDI, ids=lambda c: f"U+{ord(c):04X}")
def test_fingerprint_value_or_key_with_a_control_or_bidi_character_is_refused(char: str) -> None:
    with pytest.raises(MessageError) as err:
        ProfileClaim("p", {**FP, "gpu": f"H200{char}"}, "s")
    assert err.value.reason.startswith("profile_claim.fingerprint: the value of 'gpu' ")
    with pytest.raises(MessageError) as err:
        ProfileClaim("p", {**FP, f"gpu{char}": "H200"}, "s")
    assert err.value.reason.startswith("profile_claim.fingerprint: a key ")


def test_printable_text_passes() -> None:
    claim = ProfileClaim("p", {**FP, "gpu": "NVIDIA H200 NVL (é, ™)"}, "netcheck/0.1.0 +local")
    assert claim.fingerprint["gpu"] == "NVIDIA H200 NVL (é, ™)"


def test_a_received_auth_with_a_bidi_override_is_malformed() -> None:
    """The decoder builds the claim, so a peer's bytes get the same refusal (4009)."""
    good = ProfileClaim("p", FP, "netcheck/0.1.0")
    wire = encode_message(Auth(signature=bytes(64), claim=good))
    forged = wire.replace(b"netcheck/0.1.0", "netcheck/\u202e00".encode())  # same length
    assert len(forged) == len(wire) and forged != wire
    with pytest.raises(MessageError) as err:
        decode_message(forged)
    assert err.value.code is CloseCode.MALFORMED_MESSAGE
    assert "software" in err.value.reason
