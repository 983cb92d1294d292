"""Handshake admission limits, pure parts (netcheck/coordinator/limits.py, issue #12 item 2)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest

from netcheck.config import CoordinatorConfig
from netcheck.coordinator.limits import (
    HandshakeLimiter,
    TokenBuckets,
    client_address,
    parse_networks,
)


class NoScan(OrderedDict[str, Any]):
    """An OrderedDict that fails the test if anything iterates over it."""

    def __iter__(self) -> Any:
        raise AssertionError("the limiter scanned its table")

    def keys(self) -> Any:
        raise AssertionError("the limiter scanned its table")

    def values(self) -> Any:
        raise AssertionError("the limiter scanned its table")

    def items(self) -> Any:
        raise AssertionError("the limiter scanned its table")


def test_bucket_allows_the_burst_then_refills_at_the_rate() -> None:
    """120 per minute: 120 at once, then one every 0.5 s; refused calls are not charged."""
    b = TokenBuckets(120)
    assert all(b.take("a", 0.0) for _ in range(120))
    assert not b.take("a", 0.0)
    assert not b.take("a", 0.4)
    assert b.take("a", 0.5)
    assert not b.take("a", 0.5)
    assert b.take("b", 0.5)  # another name has its own bucket


def test_tables_stay_bounded_and_never_scan_past_ten_thousand_sources() -> None:
    """(c) 50,000 distinct sources: size stays at the cap, no attempt iterates the table."""
    limiter = HandshakeLimiter(TokenBuckets(120, max_names=1000), TokenBuckets(30, max_names=1000))
    limiter.sources._table = NoScan()
    limiter.keys._table = NoScan()
    for i in range(50_000):
        source = f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}"
        assert limiter.failed(source, float(i))
        assert limiter.succeeded(source, f"key{i}", listed=i % 2 == 0, now=float(i))
    assert len(limiter.sources) == 1000
    assert len(limiter.keys) == 1000
    # Least recently used went first: the newest names are still there.
    assert "key49999" in limiter.keys and "key0" not in limiter.keys


def test_failures_do_not_drain_an_admitted_key() -> None:
    """(a) A source out of budget still lets a listed or known key through, not a new one."""
    limiter = HandshakeLimiter.default(known_keys=["known"])
    while limiter.failed("198.51.100.1", 0.0):
        pass
    assert limiter.succeeded("198.51.100.1", "listed", listed=True, now=0.0)
    assert limiter.succeeded("198.51.100.1", "known", listed=False, now=0.0)
    assert not limiter.succeeded("198.51.100.1", "fresh", listed=False, now=0.0)


def test_a_flapping_key_is_limited_by_its_own_budget() -> None:
    """A key reconnecting in a loop is refused after its own 30 per minute."""
    limiter = HandshakeLimiter.default()
    results = [limiter.succeeded("s", "k", listed=True, now=0.0) for _ in range(31)]
    assert results == [True] * 30 + [False]


def test_new_keys_under_open_enrollment_are_charged_to_the_source() -> None:
    """Fresh keys cannot bypass the source budget: their first handshake costs a token."""
    limiter = HandshakeLimiter.default()
    joined = sum(limiter.succeeded("s", f"k{i}", listed=False, now=0.0) for i in range(200))
    assert joined == 120


TRUSTED = parse_networks(["10.0.0.0/8", "::1"])


@pytest.mark.parametrize(
    ("remote", "xff", "expected"),
    [
        ("10.0.0.5", ["203.0.113.9"], "203.0.113.9"),  # one trusted proxy
        ("10.0.0.5", ["1.2.3.4, 203.0.113.9, 10.0.0.7"], "203.0.113.9"),  # rightmost untrusted
        ("10.0.0.5", ["1.2.3.4", "203.0.113.9"], "203.0.113.9"),  # several header lines
        ("10.0.0.5", [], "10.0.0.5"),  # no header: the proxy itself
        ("10.0.0.5", ["10.0.0.6"], "10.0.0.6"),  # all trusted: the leftmost trusted hop
        ("10.0.0.5", ["garbage, 10.0.0.6"], "10.0.0.6"),  # malformed hop: last trusted
        ("203.0.113.1", ["10.0.0.9"], "203.0.113.1"),  # untrusted peer: header ignored
        ("::1", ["2001:db8::1"], "2001:db8::1"),
        (None, ["203.0.113.9"], "?"),
    ],
)
def test_client_address_takes_the_rightmost_untrusted_hop(
    remote: str | None, xff: list[str], expected: str
) -> None:
    """X-Forwarded-For counts only behind a trusted proxy, read from the right."""
    assert client_address(remote, xff, TRUSTED) == expected


def test_without_trusted_proxies_the_header_is_ignored() -> None:
    """A client cannot pick its own bucket by sending X-Forwarded-For."""
    assert client_address("10.0.0.5", ["203.0.113.9"], []) == "10.0.0.5"


def test_a_bad_trusted_proxies_entry_is_a_clear_config_error(tmp_path: Any) -> None:
    """The config names the entry that is not a network."""
    with pytest.raises(ValueError, match=r"entry 1: 'nope' is not an IP address or CIDR"):
        CoordinatorConfig(
            identity_key=tmp_path / "k.pem", open_enrollment=True, admin_token="x" * 16,
            profiles=["p"], trusted_proxies=["10.0.0.0/8", "nope"],
        )  # fmt: skip
