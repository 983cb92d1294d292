"""Clock offsets between gateways, measured through the database (pure; docs/gateways.md).

The database's ``clock_timestamp()`` is the common reference. A sample is the gateway's
wall clock before and after one ``SELECT clock_timestamp()`` and the database's answer;
as in NTP's clock filter (RFC 5905 §10), the sample with the smallest round trip is kept:
offset = database − midpoint, uncertainty = half its round trip (the true offset lies
within ± that, whatever the asymmetry of the path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ClockEstimate:
    """``offset_s``: reference clock minus this clock (seconds); ``uncertainty_s``: the
    true offset is within ``offset_s ± uncertainty_s``."""

    offset_s: float
    uncertainty_s: float


def estimate_offset(samples: Sequence[tuple[int, int, int]]) -> ClockEstimate:
    """Offset from samples ``(before_ns, reference_ns, after_ns)`` (Unix ns).

    Raises:
        ValueError: no samples, or a sample whose ``after_ns`` precedes ``before_ns``.
    """
    if not samples:
        raise ValueError("no clock samples")
    for t0, _, t1 in samples:
        if t1 < t0:
            raise ValueError("clock sample with after < before (clock stepped?)")
    t0, ref, t1 = min(samples, key=lambda s: s[2] - s[0])
    return ClockEstimate((ref - (t0 + t1) / 2) / 1e9, (t1 - t0) / 2e9)


def relative_to(gateway: ClockEstimate, leader: ClockEstimate) -> ClockEstimate:
    """The leader's clock minus the gateway's, from both offsets to the reference;
    uncertainties add."""
    return ClockEstimate(
        gateway.offset_s - leader.offset_s, gateway.uncertainty_s + leader.uncertainty_s
    )


def out_of_bounds(
    to_leader: ClockEstimate, max_offset_s: float, max_uncertainty_s: float
) -> str | None:
    """Why a gateway must sit a round out (None if it may take part)."""
    if to_leader.uncertainty_s > max_uncertainty_s:
        return (
            f"clock offset to the leader uncertain by {to_leader.uncertainty_s * 1e3:.1f} ms "
            f"(bound max_clock_uncertainty_s = {max_uncertainty_s * 1e3:.1f} ms)"
        )
    if abs(to_leader.offset_s) > max_offset_s:
        return (
            f"clock offset to the leader {to_leader.offset_s * 1e3:+.1f} ms "
            f"(bound max_clock_offset_s = {max_offset_s * 1e3:.1f} ms); fix time sync (chrony)"
        )
    return None
