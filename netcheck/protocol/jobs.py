"""Job payload encryption, output commitments and signed receipts (docs/protocol.md §7).

- Payload: ``ChaCha20-Poly1305(job_key).encrypt(nonce, pack_value(prompts),
  aad = b"netcheck/1 job\\0" || round_id)``; the node learns ``job_key`` from
  ``Release`` only, so all nodes start at the same moment.
- Commitment: ``SHA-256(b"netcheck/1 commitment\\0" || pack_value(outputs))``.
- Receipt: the node's Ed25519 signature over ``receipt_bytes(...)``, checkable offline
  by anyone holding the node's public key.

Every label differs from the handshake labels (``netcheck/1 node\\0``, ...) in its
first bytes after ``netcheck/1 `` and none is a prefix of another, so a signature
made in one context never verifies in another.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from netcheck.errors import CloseCode, KeyFileError, LocalProtocolError, MessageError
from netcheck.keys import load_public_bytes, public_key_bytes
from netcheck.protocol.codec import DEFAULT_LIMITS, Limits, pack_int_rows, pack_value, unpack_value
from netcheck.protocol.messages import valid_token_rows

JOB_LABEL = b"netcheck/1 job\0"
COMMITMENT_LABEL = b"netcheck/1 commitment\0"
RECEIPT_LABEL = b"netcheck/1 receipt\0"
SESSION_ID_BYTES = 16


def _check(name: str, value: bytes, size: int) -> None:
    if type(value) is not bytes or len(value) != size:
        raise LocalProtocolError(f"{name} must be {size} bytes")


def _aad(round_id: str) -> bytes:
    return JOB_LABEL + round_id.encode()


def seal_job(prompts: Sequence[str], job_key: bytes, round_id: str, nonce: bytes) -> bytes:
    """Encrypt a batch of prompts (§7.1). ``job_key``: 32 bytes, ``nonce``: 12 bytes,
    never reused with the same key. Returns ciphertext with its 16-byte tag.

    Raises:
        LocalProtocolError: on wrong key/nonce sizes or a prompt that is not a str.
    """
    _check("job_key", job_key, 32)
    _check("nonce", nonce, 12)
    if isinstance(prompts, str) or not all(type(p) is str for p in prompts):
        raise LocalProtocolError("prompts must be a sequence of str")
    return ChaCha20Poly1305(job_key).encrypt(nonce, pack_value(list(prompts)), _aad(round_id))


def open_job(
    ciphertext: bytes,
    job_key: bytes,
    round_id: str,
    nonce: bytes,
    limits: Limits = DEFAULT_LIMITS,
) -> list[str]:
    """Decrypt a payload sealed by ``seal_job`` (§7.1) and return the prompts, decoded
    under ``limits`` (a node passes ``protocol.limits.job_payload_limits`` of its profile).

    Raises:
        MessageError: DECRYPT_FAILED (wrong key, nonce, round id or tampered bytes),
            MALFORMED_MESSAGE (plaintext is not a list of str, or breaks codec limits).
    """
    if type(job_key) is not bytes or len(job_key) != 32 or len(nonce) != 12:
        raise MessageError(CloseCode.MALFORMED_MESSAGE, "job key or nonce of wrong size")
    try:
        plaintext = ChaCha20Poly1305(job_key).decrypt(nonce, ciphertext, _aad(round_id))
    except InvalidTag:
        raise MessageError(CloseCode.DECRYPT_FAILED, "job payload failed to decrypt") from None
    prompts = unpack_value(plaintext, limits)
    if type(prompts) is not list or not all(type(p) is str for p in prompts):
        raise MessageError(CloseCode.MALFORMED_MESSAGE, "job payload is not a list of str")
    return prompts


def commitment(outputs: Sequence[Sequence[int]]) -> bytes:
    """32-byte SHA-256 commitment to the token ids, row by row (§7.2).

    Raises:
        LocalProtocolError: if a token id is not an int in ``[0, 2**31)``.
    """
    rows = [list(row) for row in outputs]
    if not valid_token_rows(rows):
        raise LocalProtocolError("token ids must be ints in [0, 2**31)")
    # Lists of ints are already canonical (§4.3), so pack_value's per-element
    # canonicalisation is skipped: same bytes, ~50x less CPU for a 240 x 32 result.
    return hashlib.sha256(COMMITMENT_LABEL + pack_int_rows(rows)).digest()


def _lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def receipt_bytes(session_id: bytes, round_id: str, node_key: bytes, commitment: bytes) -> bytes:
    """The signed receipt (§7.3): ``b"netcheck/1 receipt\\0" || lp(session_id) ||
    lp(round_id UTF-8) || lp(node_key) || lp(commitment)``, ``lp`` = 4-byte big-endian
    length then bytes.

    Raises:
        LocalProtocolError: session_id not 16 bytes, node_key or commitment not 32.
    """
    _check("session_id", session_id, SESSION_ID_BYTES)
    _check("node_key", node_key, 32)
    _check("commitment", commitment, 32)
    return (
        RECEIPT_LABEL + _lp(session_id) + _lp(round_id.encode()) + _lp(node_key) + _lp(commitment)
    )


def sign_receipt(
    identity: Ed25519PrivateKey, session_id: bytes, round_id: str, commitment: bytes
) -> bytes:
    """The node's 64-byte Ed25519 signature over ``receipt_bytes`` (§7.3)."""
    data = receipt_bytes(session_id, round_id, public_key_bytes(identity), commitment)
    return identity.sign(data)


def verify_receipt(
    node_key: bytes, signature: bytes, session_id: bytes, round_id: str, commitment: bytes
) -> bool:
    """True iff ``signature`` is ``node_key``'s receipt signature (§7.3). Never raises
    for bad input: wrong sizes, an invalid key or a weak key (small order,
    non-canonical; ``netcheck.keys.weak_key_reason``) give False."""
    try:
        data = receipt_bytes(session_id, round_id, node_key, commitment)
        load_public_bytes(node_key, "node key").verify(signature, data)
    except (InvalidSignature, KeyFileError, LocalProtocolError, ValueError, TypeError):
        return False
    return True
