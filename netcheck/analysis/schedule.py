"""Screening schedule (pure): which nodes are loaded in a screening round.

detection.md §2: in a screening round each node is loaded with probability 1/2, from a
secret schedule that no node can predict and that an analyst can recompute once the
coordinator discloses the secret.

Construction (version ``netcheck/1``)::

    msg  = b"netcheck/1 schedule\\0" + utf8(round_id) + b"\\0" + utf8(node_key)
    bit  = HMAC-SHA256(secret, msg)[0] >> 7          # first bit of the tag

HMAC-SHA256 (RFC 2104, FIPS 198-1) is a pseudo-random function under the secret key, so
the bits are indistinguishable from independent fair coins to anyone without the
secret, including every node; a new ``round_id`` gives fresh, independent bits. The NUL
separators make the encoding injective as long as neither text contains NUL (checked).
To reproduce a schedule: Python ``hmac.new(secret, msg, "sha256").digest()[0] >> 7``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

SCHEDULE_LABEL = b"netcheck/1 schedule\0"
MIN_SECRET_BYTES = 16


def _message(round_id: str, node_key: str) -> bytes:
    if "\0" in round_id or "\0" in node_key:
        raise ValueError("round_id and node_key must not contain NUL")
    return SCHEDULE_LABEL + round_id.encode() + b"\0" + node_key.encode()


def load_bit(secret: bytes, round_id: str, node_key: str) -> bool:
    """Whether ``node_key`` is loaded in screening round ``round_id``.

    First bit of ``HMAC-SHA256(secret, b"netcheck/1 schedule\\0" + round_id + b"\\0" +
    node_key)`` (RFC 2104); see the module docstring.

    Raises:
        ValueError: if ``secret`` is shorter than 16 bytes or a text contains NUL.
    """
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"secret must be at least {MIN_SECRET_BYTES} bytes")
    tag = hmac.new(secret, _message(round_id, node_key), hashlib.sha256).digest()
    return bool(tag[0] >> 7)


def screening_plan(secret: bytes, round_id: str, node_keys: Iterable[str]) -> dict[str, bool]:
    """Load bit of every node in one screening round: ``{node_key: loaded}``.

    Raises:
        ValueError: as :func:`load_bit`.
    """
    return {key: load_bit(secret, round_id, key) for key in node_keys}
