"""Tests for netcheck.analysis.schedule: the secret screening schedule."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from netcheck.analysis.schedule import load_bit, screening_plan

SECRET = bytes(range(32))
KEYS = [f"node-{i}" for i in range(2000)]


def test_matches_documented_construction() -> None:
    """The bit is the first bit of HMAC-SHA256 over the documented message."""
    msg = b"netcheck/1 schedule\0" + b"round-7" + b"\0" + b"node-3"
    expected = bool(hmac.new(SECRET, msg, hashlib.sha256).digest()[0] >> 7)
    assert load_bit(SECRET, "round-7", "node-3") is expected


def test_bits_are_fair_coins() -> None:
    """About half of 2000 nodes are loaded (within 4 standard deviations)."""
    ones = sum(screening_plan(SECRET, "round-1", KEYS).values())
    assert abs(ones - 1000) < 4 * (2000 * 0.25) ** 0.5


def test_reproducible_and_differs_per_round_and_secret() -> None:
    """Same inputs give the same plan; another round or secret gives another plan."""
    plan = screening_plan(SECRET, "round-1", KEYS)
    assert plan == screening_plan(SECRET, "round-1", KEYS)
    assert plan != screening_plan(SECRET, "round-2", KEYS)
    assert plan != screening_plan(bytes(32), "round-1", KEYS)


def test_rejects_short_secret_and_nul() -> None:
    """A short secret or a NUL in a text is refused."""
    with pytest.raises(ValueError):
        load_bit(b"short", "r", "n")
    with pytest.raises(ValueError):
        load_bit(SECRET, "r\0x", "n")


def test_pair_coverage_bounds_what_any_detector_can_link() -> None:
    """The exact chance that a pair has >= 2 rounds in each of the three arms a mutual
    edge needs: matches a Monte Carlo of the same design and the session-2 figures."""
    import random

    from netcheck.analysis.schedule import pair_coverage, rounds_for_coverage

    assert round(pair_coverage(12), 4) == 0.5584
    assert round(pair_coverage(24), 4) == 0.9729
    assert pair_coverage(5) == 0.0 and pair_coverage(6) == 4**-6 * 90
    rng = random.Random(3)
    hits = 0
    for _ in range(20_000):
        arms = [0, 0, 0, 0]
        for _ in range(12):
            arms[rng.getrandbits(2)] += 1
        hits += min(arms[1:]) >= 2
    assert abs(hits / 20_000 - pair_coverage(12)) < 0.02
    assert rounds_for_coverage(0.95) == 22 and pair_coverage(22) >= 0.95 > pair_coverage(21)
