"""Capacity of a profile: can one card pass as two node identities? (issue 10)

A profile's ``[capacity]`` table (:class:`~netcheck.config.CapacityRecord`, written by
``netcheck engine calibrate``) records t(k), the time until all k batches are done when
k identities share one card and start together. The **capacity margin** is
``t(2) / D``, D the profile's deadline with the largest RTT a node can be credited
(``max_rtt_s``): below 1 two identities on one card both finish in time, so the timing
checks cannot tell them from two cards. Below :data:`MIN_MARGIN`, or without a
``[capacity]`` table, every place an operator looks (coordinator start, ``netcheck
doctor``, ``engine selftest``, the dashboard) says so in :data:`UNSAFE_TEXT`, and
``screen run`` refuses the profile unless overridden.

Pure functions; no engine, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from netcheck.config import DeadlineParams, Profile

MIN_MARGIN = 1.2
"""Below this capacity margin a profile is unsafe for capacity (issue 10)."""
TARGET_MARGIN = 1.5
"""Margin the shipped GPU profiles are shaped for."""
UNSAFE_TEXT = "this profile cannot tell two identities on one card apart"
MIN_SPREAD = 0.05
"""Smallest relative honest spread assumed by :func:`derive_deadline` (5%: issue 10 saw
about +/-5% on an H200; a p99 from a few batches underestimates the tail)."""


@dataclass(frozen=True)
class CapacityStatus:
    """Verdict on one profile's capacity.

    Attributes:
        profile: profile name.
        safe: margin measured and >= :data:`MIN_MARGIN`.
        margin: ``t(2) / D(max_rtt_s)`` from the ``[capacity]`` table and the profile's
            current deadline; None when unmeasured.
        message: one line for operators.
    """

    profile: str
    safe: bool
    margin: float | None
    message: str


def capacity_margin(t2_s: float, profile: Profile) -> float:
    """``t2_s / profile.deadline_s(max_rtt_s)``: the margin against the most deadline a
    node can be given. Raises ValueError if ``t2_s <= 0``."""
    if not t2_s > 0:
        raise ValueError(f"t(2) must be > 0 seconds, got {t2_s}")
    return t2_s / profile.deadline_s(profile.deadline.max_rtt_s)


def calibrate_hint(profile: Profile, prog: str | None = "netcheck") -> str:
    """What to run to measure ``profile``'s capacity: ``engine calibrate`` on the trusted
    card (machine, for a CPU profile), or on each card of the class and then ``engine
    pool`` (docs/capacity.md, "Pooling several cards"). ``prog`` is how to call netcheck
    (the CLI passes ``netcheck.admin_client.invoked_as()``; this layer does not import it);
    ``None`` when that is not known (a message the coordinator sends to an HTTP client):
    the commands are then named as netcheck's, without a program to call.
    """
    unit = "machine" if profile.device == "cpu" else "card"
    calibrate = f"engine calibrate --profile {profile.name}"
    if prog is None:
        return (
            f"run netcheck's `{calibrate}` on the trusted {unit}; for a class of several "
            f"{unit}s, calibrate each and pool the records with netcheck's `engine pool`"
        )
    return (
        f"run `{prog} {calibrate}` on the trusted {unit}; for a class of several {unit}s, "
        f"calibrate each and pool the records with `{prog} engine pool`"
    )


def capacity_status(profile: Profile, prog: str | None = "netcheck") -> CapacityStatus:
    """Whether ``profile`` can tell two identities on one card apart (see module doc).

    The margin is recomputed from the recorded t(2) and the profile's *current* deadline,
    so a deadline edited after calibration is judged as it is now. ``prog`` is how the
    message's commands call netcheck, ``None`` if not known (:func:`calibrate_hint`).
    """
    cap = profile.capacity
    if cap is None or len(cap.t_s) < 2:
        return CapacityStatus(
            profile.name,
            False,
            None,
            f"profile {profile.name}: capacity not measured "
            f"({calibrate_hint(profile, prog)}): {UNSAFE_TEXT}",
        )
    margin = capacity_margin(cap.t_s[1], profile)
    where = f"t(2) {cap.t_s[1]:.3f} s on {cap.card}, {cap.date}"
    if margin < MIN_MARGIN:
        return CapacityStatus(
            profile.name,
            False,
            margin,
            f"profile {profile.name}: capacity margin {margin:.2f} < {MIN_MARGIN} ({where}): "
            f"{UNSAFE_TEXT}",
        )
    return CapacityStatus(
        profile.name,
        True,
        margin,
        f"profile {profile.name}: capacity margin {margin:.2f} ({where})",
    )


def unsafe_profiles(
    profiles: Sequence[Profile], prog: str | None = "netcheck"
) -> list[CapacityStatus]:
    """The statuses of ``profiles`` that are not safe for capacity, in order; ``prog`` as
    in :func:`capacity_status` (``None``: the commands are named as netcheck's, for a
    reader whose way of calling netcheck is not known: a dashboard user, a log reader)."""
    return [s for s in (capacity_status(p, prog) for p in profiles) if not s.safe]


def co_load_beta(t_s: Sequence[float]) -> list[float]:
    """beta(k) = (t(k)/t(1) - 1)/(k - 1) for k = 2 .. len(t_s) (issue 10).

    Raises ValueError on an empty list or a non-positive time.
    """
    if not t_s or any(t <= 0 for t in t_s):
        raise ValueError(f"need positive t(k) values, got {list(t_s)}")
    return [(t_s[k - 1] / t_s[0] - 1) / (k - 1) for k in range(2, len(t_s) + 1)]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0 < q <= 100) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def check_network(rtt_jitter_s: float, max_rtt_s: float) -> None:
    """Check the network figures of :func:`derive_deadline` (``--rtt-jitter-s``,
    ``--max-rtt-s``: seconds).

    Raises:
        ValueError: either is not a finite number >= 0 (NaN passes a plain ``< 0`` test,
            and ``engine calibrate`` checks this before minutes of measuring).
    """
    for name, value in (("rtt_jitter_s", rtt_jitter_s), ("max_rtt_s", max_rtt_s)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")


def derive_deadline(
    times_s: Sequence[float],
    *,
    rtt_jitter_s: float,
    max_rtt_s: float,
    min_spread: float = MIN_SPREAD,
    coupling: float = 0.0,
) -> DeadlineParams:
    """Deadline parameters from measured honest batch times instead of fixed constants.

    With t_ref = median, p99 = nearest-rank 99th percentile and the honest relative
    spread ``h = max((p99 - t_ref) / t_ref, min_spread)``:
    ``a = 1 + 2h`` (the median term covers twice the honest spread),
    ``b = 1 + h`` (the tail term covers it once more above p99),
    ``slack_s = 2 * rtt_jitter_s`` (the RTT is measured before release and credited as
    ``2 * rtt``; its jitter is what that misses), ``max_rtt_s`` and ``coupling`` as
    given (the benign co-hosting slowdown allowed on top: the times are measured on a
    card alone, :attr:`DeadlineParams.coupling`).
    With +/-5% spread this gives D of about 1.1 t_ref (issue 10), 1.32 t_ref with
    coupling 0.2, where the old constants (a = 1.5, slack 0.5 s) gave 1.5 t_ref + 0.5 s.

    Args:
        times_s: honest single-identity batch times, seconds (at least 1).
        rtt_jitter_s: spread of the node network's echo RTT, seconds (>= 0).
        max_rtt_s: largest RTT credited to a node, seconds (>= 0).
        coupling: benign co-hosting slowdown allowed for, fraction (0 <= coupling < 1).

    Raises:
        ValueError: empty ``times_s``, a non-positive time, a jitter/RTT that is negative
        or not finite, or a coupling outside [0, 1).
    """
    if not times_s or any(t <= 0 for t in times_s):
        raise ValueError("need at least one positive batch time")
    check_network(rtt_jitter_s, max_rtt_s)
    if not 0 <= coupling < 1:
        raise ValueError(f"coupling must be in [0, 1), got {coupling}")
    t_ref = sorted(times_s)[len(times_s) // 2]
    p99 = percentile(times_s, 99)
    h = max((p99 - t_ref) / t_ref, min_spread)
    return DeadlineParams(
        t_ref_s=round(t_ref, 4),
        p99_s=round(p99, 4),
        a=round(1 + 2 * h, 3),
        b=round(1 + h, 3),
        slack_s=round(2 * rtt_jitter_s, 4),
        max_rtt_s=max_rtt_s,
        coupling=coupling,
    )
