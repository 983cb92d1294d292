"""Seeds of the workload input streams: any int or bytes, mapped to one big integer."""

from __future__ import annotations

import hashlib


def seed_int(scheme: bytes, seed: int | bytes) -> int:
    """SHA-256 of ``scheme``, a NUL and the typed seed, as a big-endian integer.

    ``scheme`` names the stream and its version (``b"netcheck-prompts-v1"``): two streams,
    or two versions of one, never share a seed. An int and the bytes of its digits are
    different seeds.

    Raises:
        TypeError: ``seed`` is neither int nor bytes (a bool counts as neither).
    """
    if isinstance(seed, bool) or not isinstance(seed, int | bytes):
        raise TypeError(f"seed must be int or bytes, not {type(seed).__name__}")
    material = b"int:" + str(seed).encode() if isinstance(seed, int) else b"bytes:" + seed
    return int.from_bytes(hashlib.sha256(scheme + b"\0" + material).digest(), "big")
