"""The signed doctor query (docs/protocol.md §5.12), sans-I/O.

``netcheck doctor`` asks the coordinator whether it would accept this node's profile and
has references for its engine fingerprint, *without* opening a session (``auth`` would
register one and replace a running node's). The question is an HTTP POST to
``/v1/doctor`` whose JSON body is signed by the node's identity key over::

    b"netcheck/1 doctor\\x00" || pack_value([node_key, profile, fingerprint, time])

(``node_key`` raw 32 bytes; ``time`` Unix seconds as a float). The coordinator answers
only admitted keys and only for a ``time`` within :data:`MAX_SKEW_S` of its clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from netcheck.protocol.codec import pack_value

DOMAIN = b"netcheck/1 doctor\x00"
PATH = "/v1/doctor"
#: A query older or newer than this (seconds) is refused (replay bound).
MAX_SKEW_S = 120.0


def doctor_bytes(
    node_key: bytes, profile: str, fingerprint: Mapping[str, str | int], at: float
) -> bytes:
    """The signed bytes of a doctor query (module docstring)."""
    return DOMAIN + pack_value([node_key, profile, dict(fingerprint), float(at)])


def sign_doctor(
    identity: Ed25519PrivateKey, profile: str, fingerprint: Mapping[str, str | int], at: float
) -> bytes:
    """The node's signature over its doctor query."""
    raw = identity.public_key().public_bytes_raw()
    return identity.sign(doctor_bytes(raw, profile, fingerprint, at))


def verify_doctor(
    node_key: Ed25519PublicKey,
    profile: str,
    fingerprint: Mapping[str, str | int],
    at: float,
    signature: bytes,
) -> bool:
    """True if ``signature`` is ``node_key``'s over this query."""
    try:
        node_key.verify(
            signature, doctor_bytes(node_key.public_bytes_raw(), profile, fingerprint, at)
        )
    except InvalidSignature:
        return False
    return True
