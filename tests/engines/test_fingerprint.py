"""Tests for netcheck.engines.fingerprint."""

from __future__ import annotations

import hashlib
import json

from netcheck.engines.fingerprint import (
    FINGERPRINT_KEYS,
    canonical_json,
    fingerprint_id,
    make_fingerprint,
)


def _fp(**overrides: object) -> dict[str, str | int]:
    fields: dict[str, object] = {
        "engine": "torch",
        "engine_version": "torch-2.13.0+cpu+transformers-5.19.0",
        "model_id": "synth:tiny",
        "weight_hash": "ab" * 32,
        "dtype": "float32",
        "device": "cpu",
        "batch_size": 8,
        "prompt_len": 64,
        "max_new_tokens": 16,
    }
    fields.update(overrides)
    return make_fingerprint(**fields)  # type: ignore[arg-type]


def test_keys_exact() -> None:
    """A fingerprint has exactly the contract's keys, decoding greedy."""
    fp = _fp()
    assert tuple(fp) == FINGERPRINT_KEYS
    assert fp["decoding"] == "greedy"


def test_id_is_sha256_of_canonical_json() -> None:
    """fingerprint_id is the hex SHA-256 of sorted, whitespace-free JSON."""
    fp = _fp()
    text = json.dumps(fp, sort_keys=True, separators=(",", ":")).encode()
    assert canonical_json(fp) == text
    assert fingerprint_id(fp) == hashlib.sha256(text).hexdigest()
    assert len(fingerprint_id(fp)) == 64


def test_id_ignores_key_order() -> None:
    """Insertion order of the keys does not change the id."""
    fp = _fp()
    reordered = dict(reversed(list(fp.items())))
    assert fingerprint_id(reordered) == fingerprint_id(fp)


def test_id_changes_with_every_field() -> None:
    """Changing any one field changes the id."""
    base = fingerprint_id(_fp())
    changes = {
        "engine": "vllm",
        "engine_version": "x",
        "model_id": "synth:small",
        "weight_hash": "cd" * 32,
        "dtype": "bfloat16",
        "device": "NVIDIA H200",
        "batch_size": 9,
        "prompt_len": 65,
        "max_new_tokens": 17,
    }
    for key, value in changes.items():
        assert fingerprint_id(_fp(**{key: value})) != base, key
