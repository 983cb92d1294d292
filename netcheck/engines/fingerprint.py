"""Engine fingerprints: everything that shapes the numerics of a batch.

Two engines with equal fingerprints must produce identical tokens for identical
prompts; a reference set is keyed by :func:`fingerprint_id` of the engine that built it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

Fingerprint = dict[str, str | int]
"""Keys: engine, engine_version, model_id, weight_hash, dtype, device, batch_size,
prompt_len, max_new_tokens, decoding (always ``"greedy"``), and for CPU torch engines
cpu_threads (the intra-op thread count changes the reduction order of CPU matmuls)."""

FINGERPRINT_KEYS = (
    "engine",
    "engine_version",
    "model_id",
    "weight_hash",
    "dtype",
    "device",
    "batch_size",
    "prompt_len",
    "max_new_tokens",
    "decoding",
)


def make_fingerprint(
    *,
    engine: str,
    engine_version: str,
    model_id: str,
    weight_hash: str,
    dtype: str,
    device: str,
    batch_size: int,
    prompt_len: int,
    max_new_tokens: int,
    cpu_threads: int | None = None,
) -> Fingerprint:
    """Build a fingerprint dict with :data:`FINGERPRINT_KEYS` (decoding greedy), plus
    ``cpu_threads`` when given."""
    fp: Fingerprint = {
        "engine": engine,
        "engine_version": engine_version,
        "model_id": model_id,
        "weight_hash": weight_hash,
        "dtype": dtype,
        "device": device,
        "batch_size": int(batch_size),
        "prompt_len": int(prompt_len),
        "max_new_tokens": int(max_new_tokens),
        "decoding": "greedy",
    }
    if cpu_threads is not None:
        fp["cpu_threads"] = int(cpu_threads)
    return fp


def canonical_json(fp: Mapping[str, str | int]) -> bytes:
    """``json.dumps(fp, sort_keys=True, separators=(",", ":"))`` (ASCII) as bytes."""
    return json.dumps(dict(fp), sort_keys=True, separators=(",", ":")).encode()


def fingerprint_id(fp: Mapping[str, str | int]) -> str:
    """Hex SHA-256 (64 lowercase characters) of :func:`canonical_json` of ``fp``."""
    return hashlib.sha256(canonical_json(fp)).hexdigest()
