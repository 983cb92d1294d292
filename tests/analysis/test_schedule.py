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


def test_pair_coverage_with_one_testable_direction() -> None:
    """``either_direction`` (``DetectorConfig.mutual_one_way``): both-loaded rounds plus
    either one-loaded arm. Matches a Monte Carlo of the rule at q 1/2 and 2/3."""
    import random

    from netcheck.analysis.schedule import pair_coverage, rounds_for_coverage

    assert round(pair_coverage(12, 1, either_direction=True), 4) == 0.9681
    assert round(pair_coverage(16, 1, either_direction=True), 4) == 0.99
    rng = random.Random(5)
    for q in (0.5, 2 / 3):
        hits = 0
        for _ in range(20_000):
            a = b = c = 0
            for _ in range(12):
                x, y = rng.random() < q, rng.random() < q
                a, b, c = a + (x and y), b + (x and not y), c + (y and not x)
            hits += a >= 1 and (b >= 1 or c >= 1)
        assert abs(hits / 20_000 - pair_coverage(12, 1, q, either_direction=True)) < 0.01
    assert rounds_for_coverage(0.95, 1, either_direction=True) == 11


def test_load_probability_reads_the_tag_as_a_uniform_number() -> None:
    """At q the bit is ``int(tag[:8]) >= 2^64 - floor(q 2^64)`` (module docstring); at 1/2
    that is the tag's first bit (the rule before session 8), and the loaded sets are
    nested: a node loaded at 1/2 is loaded at 2/3."""
    msg = b"netcheck/1 schedule\0" + b"round-7" + b"\0"
    for key in KEYS[:200]:
        tag = hmac.new(SECRET, msg + key.encode(), hashlib.sha256).digest()
        u = int.from_bytes(tag[:8], "big")
        assert load_bit(SECRET, "round-7", key, 2 / 3) is (u >= 2**64 - int(2 / 3 * 2**64))
        assert load_bit(SECRET, "round-7", key, 0.5) is bool(tag[0] >> 7)
    half = screening_plan(SECRET, "round-1", KEYS, 0.5)
    two_thirds = screening_plan(SECRET, "round-1", KEYS, 2 / 3)
    assert half == screening_plan(SECRET, "round-1", KEYS)
    assert all(two_thirds[k] for k, bit in half.items() if bit)
    ones = sum(two_thirds.values())  # within 4 standard deviations of 2000 * 2/3
    assert abs(ones - 2000 * 2 / 3) < 4 * (2000 * 2 / 9) ** 0.5
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="load probability"):
            load_bit(SECRET, "r", "n", bad)


def test_rule_name_carries_the_load_probability() -> None:
    """The stored rule names q unless it is 1/2 (rounds stored before session 8)."""
    from netcheck.analysis.schedule import HMAC_RULE, rule_name

    assert rule_name(0.5) == HMAC_RULE == "hmac-sha256/netcheck/1"
    assert rule_name(2 / 3) == "hmac-sha256/netcheck/1;q=0.6666666666666666"
    assert float(rule_name(0.25).split(";q=")[1]) == 0.25
    with pytest.raises(ValueError):
        rule_name(1.0)


def test_rule_probability_reads_the_load_probability_back() -> None:
    """The inverse of rule_name: 1/2 for the plain rule, q for ``;q=``; None for the
    rules of other rounds and for anything malformed or outside (0, 1)."""
    from netcheck.analysis.coins import COIN_RULE
    from netcheck.analysis.schedule import HMAC_RULE, rule_name, rule_probability

    for q in (0.5, 2 / 3, 0.25, 0.1, 1e-3):
        assert rule_probability(rule_name(q)) == q
    assert rule_probability(HMAC_RULE) == 0.5
    for other in ("all", "explicit", COIN_RULE, "synthetic", "", f"{HMAC_RULE};q=",
                  f"{HMAC_RULE};q=x", f"{HMAC_RULE};q=1.0", f"{HMAC_RULE};q=nan",
                  f"{HMAC_RULE};q=-0.5", "hmac-sha256/netcheck/2;q=0.5"):  # fmt: skip
        assert rule_probability(other) is None, other


def test_pair_coverage_at_another_load_probability() -> None:
    """Arms both / first only / second only / neither at q^2, q(1-q), q(1-q), (1-q)^2:
    the exact sum matches a Monte Carlo of that design."""
    import random

    from netcheck.analysis.schedule import pair_coverage, rounds_for_coverage

    q = 2 / 3
    rng = random.Random(5)
    hits = 0
    for _ in range(20_000):
        arms = [0, 0, 0, 0]
        for _ in range(12):
            arms[2 * (rng.random() < q) + (rng.random() < q)] += 1
        hits += min(arms[1:]) >= 2
    assert abs(hits / 20_000 - pair_coverage(12, probability=q)) < 0.02
    assert round(pair_coverage(24, probability=q), 3) == 0.962
    assert rounds_for_coverage(0.95, probability=q) == 23
    with pytest.raises(ValueError):
        pair_coverage(12, probability=0.0)
