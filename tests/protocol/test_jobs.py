"""Job payload encryption, commitments and receipts (docs/protocol.md §7)."""

from __future__ import annotations

import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from netcheck.errors import CloseCode, LocalProtocolError, MessageError
from netcheck.keys import public_key_bytes
from netcheck.protocol import (
    commitment,
    open_job,
    pack_value,
    receipt_bytes,
    seal_job,
    sign_receipt,
    verify_receipt,
)
from netcheck.protocol.jobs import JOB_LABEL

KEY, NONCE, SID = bytes(range(32)), bytes(range(12)), bytes(range(16))
PROMPTS = ["The river bends", "Tell me about ships", ""]


def test_job_round_trip():
    """open_job(seal_job(prompts)) returns the prompts."""
    assert open_job(seal_job(PROMPTS, KEY, "r1", NONCE), KEY, "r1", NONCE) == PROMPTS


def test_job_ciphertext_layout():
    """The payload is ChaCha20-Poly1305 of pack_value(prompts) with the labelled AAD."""
    sealed = seal_job(PROMPTS, KEY, "r1", NONCE)
    expected = ChaCha20Poly1305(KEY).encrypt(NONCE, pack_value(PROMPTS), JOB_LABEL + b"r1")
    assert sealed == expected


@pytest.mark.parametrize(
    ("key", "round_id", "nonce"),
    [(bytes(32), "r1", NONCE), (KEY, "r2", NONCE), (KEY, "r1", bytes(12))],
)
def test_job_wrong_key_round_or_nonce(key, round_id, nonce):
    """A wrong key, round id (AAD) or nonce is DECRYPT_FAILED."""
    sealed = seal_job(PROMPTS, KEY, "r1", NONCE)
    with pytest.raises(MessageError) as err:
        open_job(sealed, key, round_id, nonce)
    assert err.value.code is CloseCode.DECRYPT_FAILED


def test_job_tampered():
    """A flipped bit in the payload is DECRYPT_FAILED."""
    sealed = bytearray(seal_job(PROMPTS, KEY, "r1", NONCE))
    sealed[3] ^= 0x80
    with pytest.raises(MessageError) as err:
        open_job(bytes(sealed), KEY, "r1", NONCE)
    assert err.value.code is CloseCode.DECRYPT_FAILED


@pytest.mark.parametrize("payload", [pack_value({"a": 1}), pack_value(["a", 1]), b"\xc1"])
def test_job_payload_not_prompts(payload):
    """An authentic payload that is not a list of str is MALFORMED_MESSAGE."""
    sealed = ChaCha20Poly1305(KEY).encrypt(NONCE, payload, JOB_LABEL + b"r1")
    with pytest.raises(MessageError) as err:
        open_job(sealed, KEY, "r1", NONCE)
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


def test_open_job_bad_sizes():
    """open_job with a key or nonce of the wrong size is MALFORMED_MESSAGE."""
    with pytest.raises(MessageError):
        open_job(bytes(32), bytes(31), "r1", NONCE)


@pytest.mark.parametrize(
    "args",
    [
        (PROMPTS, bytes(31), "r1", NONCE),
        (PROMPTS, KEY, "r1", bytes(11)),
        ("a string", KEY, "r1", NONCE),
        (["ok", 3], KEY, "r1", NONCE),
    ],
)
def test_seal_job_checks_arguments(args):
    """seal_job refuses wrong sizes and non-str prompts (local errors)."""
    with pytest.raises(LocalProtocolError):
        seal_job(*args)


def test_commitment_definition():
    """commitment = SHA-256("netcheck/1 commitment\\0" || pack_value(rows))."""
    rows = [[1, 2, 3], [4, 5, 6]]
    expected = hashlib.sha256(b"netcheck/1 commitment\0" + pack_value(rows)).digest()
    assert commitment(rows) == expected
    assert commitment(((1, 2, 3), (4, 5, 6))) == expected
    assert len(expected) == 32


def test_commitment_binds_rows_and_tokens():
    """Moving a row boundary or changing one token changes the commitment."""
    base = commitment([[1, 2], [3]])
    assert commitment([[1], [2, 3]]) != base
    assert commitment([[1, 2], [4]]) != base
    assert commitment([[1, 2]]) != base


@pytest.mark.parametrize("rows", [[[-1]], [[2**31]], [[1.0]], [[True]]])
def test_commitment_rejects_bad_tokens(rows):
    """Token ids outside [0, 2**31) or not ints are local errors."""
    with pytest.raises(LocalProtocolError):
        commitment(rows)


def test_receipt_bytes_layout():
    """receipt = label || lp(session_id) || lp(round_id) || lp(node_key) || lp(commitment)."""
    data = receipt_bytes(SID, "r1", bytes(32), bytes([7]) * 32)
    assert data == (
        b"netcheck/1 receipt\0"
        + b"\0\0\0\x10"
        + SID
        + b"\0\0\0\x02r1"
        + b"\0\0\0\x20"
        + bytes(32)
        + b"\0\0\0\x20"
        + bytes([7]) * 32
    )


@pytest.mark.parametrize(
    "args",
    [
        (bytes(15), "r", bytes(32), bytes(32)),
        (SID, "r", bytes(31), bytes(32)),
        (SID, "r", bytes(32), bytes(33)),
    ],
)
def test_receipt_bytes_checks_sizes(args):
    """Wrong session id, key or commitment sizes are local errors."""
    with pytest.raises(LocalProtocolError):
        receipt_bytes(*args)


def test_receipt_sign_and_verify():
    """A receipt verifies under the node key and only for the same fields."""
    node = Ed25519PrivateKey.generate()
    key = public_key_bytes(node)
    digest = commitment([[1, 2]])
    signature = sign_receipt(node, SID, "r1", digest)
    assert len(signature) == 64
    assert verify_receipt(key, signature, SID, "r1", digest)
    assert not verify_receipt(key, signature, bytes(16), "r1", digest)
    assert not verify_receipt(key, signature, SID, "r2", digest)
    assert not verify_receipt(key, signature, SID, "r1", commitment([[1, 3]]))
    other = public_key_bytes(Ed25519PrivateKey.generate())
    assert not verify_receipt(other, signature, SID, "r1", digest)


@pytest.mark.parametrize(
    "args",
    [
        (bytes(31), bytes(64), SID, "r1", bytes(32)),
        (bytes(32), bytes(63), SID, "r1", bytes(32)),
        (bytes(32), bytes(64), bytes(3), "r1", bytes(32)),
        (bytes(32), bytes(64), SID, "\ud800", bytes(32)),
    ],
)
def test_verify_receipt_never_raises(args):
    """Bad input to verify_receipt gives False, not an exception."""
    assert verify_receipt(*args) is False
