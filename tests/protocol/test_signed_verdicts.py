"""Signed verdict notices (docs/protocol.md §5.11): signature and public reasons."""

from __future__ import annotations

import dataclasses

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.protocol.codec import decode_message, encode_message
from netcheck.protocol.verdicts import PUBLIC_REASONS, public_reason, sign_verdict, verify_verdict

SID = bytes(range(16))
NODE = bytes(32)


def test_signed_notice_verifies_and_round_trips() -> None:
    """A notice verifies with the coordinator key after encode/decode."""
    key = Ed25519PrivateKey.generate()
    notice = sign_verdict(key, SID, NODE, "r1", "late", "slow", 2.5, 2.0)
    again = decode_message(encode_message(notice))
    assert again == notice
    assert verify_verdict(key.public_key(), SID, NODE, notice)


def test_any_changed_field_or_key_fails() -> None:
    """Another verdict, reason, time, round, session, node or signer fails the check."""
    key = Ed25519PrivateKey.generate()
    notice = sign_verdict(key, SID, NODE, "r1", "pass", "ok", 0.5, None)
    for change in (
        {"verdict": "late"}, {"reason": "x"}, {"elapsed_s": 0.6}, {"deadline_s": 1.0},
        {"round_id": "r2"},
    ):  # fmt: skip
        assert not verify_verdict(
            key.public_key(), SID, NODE, dataclasses.replace(notice, **change)
        )
    assert not verify_verdict(key.public_key(), bytes(16), NODE, notice)
    assert not verify_verdict(key.public_key(), SID, b"\x01" * 32, notice)
    assert not verify_verdict(Ed25519PrivateKey.generate().public_key(), SID, NODE, notice)


def test_public_reasons_never_mention_canaries() -> None:
    """The fixed texts name no canary, position or count; only profile-mismatch adds detail."""
    for verdict, text in PUBLIC_REASONS.items():
        assert "canar" not in text.lower() and "position" not in text.lower()
        assert public_reason(verdict, "canary at position 3") == text or verdict == (
            "profile-mismatch"
        )
    assert public_reason("profile-mismatch", "cpu_threads: node 2, references 1").endswith(
        "cpu_threads: node 2, references 1"
    )
