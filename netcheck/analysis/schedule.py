"""Screening schedule (pure): which nodes are loaded in a screening round.

detection.md §2: in a screening round each node is loaded with probability ``q``
(``CoordinatorConfig.screening_load_probability``, default 1/2),
from a secret schedule that no node can predict and that an analyst can recompute once
the coordinator discloses the secret.

Construction (version ``netcheck/1``)::

    msg  = b"netcheck/1 schedule\\0" + utf8(round_id) + b"\\0" + utf8(node_key)
    u    = int.from_bytes(HMAC-SHA256(secret, msg)[:8], "big")   # 64-bit uniform
    bit  = u >= 2**64 - floor(q * 2**64)

At ``q = 1/2`` the bit is the first bit of the tag, ``HMAC-SHA256(secret, msg)[0] >> 7``
(the rule before session 8, unchanged). HMAC-SHA256 (RFC 2104, FIPS 198-1) is a
pseudo-random function under the secret key, so ``u`` is indistinguishable from a
uniform 64-bit number to anyone without the secret, including every node: the bits are
independent coins of probability ``floor(q 2^64) / 2^64``, and a new ``round_id`` gives
fresh, independent bits. The NUL separators make the encoding injective as long as
neither text contains NUL (checked). Each stored screening round's rule
(:func:`rule_name`) carries ``q``.

Other values than 1/2 (docs/detection-history.md, "Session 8"): a pair's contention
contrast in one direction compares the node's rounds with the partner loaded (``q^2`` of all rounds)
to those without (``q (1 - q)``), so its variance is proportional to ``1 / (q^2 (1 -
q))``, smallest at ``q = 2/3``: 19% less variance (9% more z) per screening round than
at 1/2, for a third more loaded nodes per round (per unit of GPU work 1/2 is the most
efficient: the information per loaded node is proportional to ``q (1 - q)``). Measured
at 2/3: more farm pairs found by 32 rounds, but honest co-hosted nodes, whose
neighbour is then loaded in most of their rounds, drew a capacity and a slow flag (the
floors of those tests assumed about half); so the default stayed 1/2. Since session 9
those floors follow ``q`` (:func:`netcheck.analysis.lateness.null_p0`,
:func:`netcheck.analysis.slowness.null_rate`,
:func:`netcheck.analysis.alone.nominate_floor`).
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Iterable, Mapping

SCHEDULE_LABEL = b"netcheck/1 schedule\0"
MIN_SECRET_BYTES = 16
#: the stored rule of screening rounds at ``q = 1/2`` (:func:`rule_name`)
HMAC_RULE = "hmac-sha256/netcheck/1"


def _check_probability(probability: float) -> None:
    if not 0.0 < probability < 1.0:
        raise ValueError(f"load probability must be in (0, 1), got {probability!r}")


def rule_name(probability: float = 0.5) -> str:
    """The rule stored with a screening round's bits: :data:`HMAC_RULE`, with ``;q=``
    and ``repr(probability)`` appended unless ``probability`` is 1/2.

    Raises:
        ValueError: ``probability`` outside (0, 1).
    """
    _check_probability(probability)
    return HMAC_RULE if probability == 0.5 else f"{HMAC_RULE};q={probability!r}"


def rule_probability(rule: str) -> float | None:
    """The load probability a stored screening rule carries (the inverse of
    :func:`rule_name`): 1/2 for :data:`HMAC_RULE`, ``q`` for ``HMAC_RULE;q=<q>``; None
    for any other rule (``all`` of full rounds, the ``explicit`` rules of confirmation
    rounds, an unknown or malformed one, a ``q`` outside (0, 1)): such a round stores
    no ``q``."""
    if rule == HMAC_RULE:
        return 0.5
    head, sep, tail = rule.partition(";q=")
    if head != HMAC_RULE or not sep:
        return None
    try:
        q = float(tail)
    except ValueError:
        return None
    return q if 0.0 < q < 1.0 else None


def round_mixes(
    round_ids: Iterable[str], round_q: Mapping[str, float] | None, load_probability: float
) -> tuple[tuple[float, int], ...]:
    """The load probabilities the rounds ``round_ids`` ran at, with how many ran at
    each, ascending: ``round_q[r]`` (the stored ``q``), else ``load_probability`` (the
    configured one: a round without a stored ``q``, or ``round_q`` None)."""
    counts: dict[float, int] = {}
    for rid in round_ids:
        q = load_probability if round_q is None else round_q.get(rid, load_probability)
        counts[q] = counts.get(q, 0) + 1
    return tuple(sorted(counts.items()))


def _message(round_id: str, node_key: str) -> bytes:
    if "\0" in round_id or "\0" in node_key:
        raise ValueError("round_id and node_key must not contain NUL")
    return SCHEDULE_LABEL + round_id.encode() + b"\0" + node_key.encode()


def load_bit(secret: bytes, round_id: str, node_key: str, probability: float = 0.5) -> bool:
    """Whether ``node_key`` is loaded in screening round ``round_id``: the first 8 bytes
    of ``HMAC-SHA256(secret, b"netcheck/1 schedule\\0" + round_id + b"\\0" + node_key)``
    (RFC 2104), big-endian, at least ``2^64 - floor(probability 2^64)``; at 1/2 the
    tag's first bit. See the module docstring.

    Raises:
        ValueError: if ``secret`` is shorter than 16 bytes, a text contains NUL or
            ``probability`` is outside (0, 1).
    """
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"secret must be at least {MIN_SECRET_BYTES} bytes")
    _check_probability(probability)
    tag = hmac.digest(secret, _message(round_id, node_key), "sha256")
    return int.from_bytes(tag[:8], "big") >= 2**64 - math.floor(probability * 2**64)


def screening_plan(
    secret: bytes, round_id: str, node_keys: Iterable[str], probability: float = 0.5
) -> dict[str, bool]:
    """Load bit of every node in one screening round: ``{node_key: loaded}``.

    Raises:
        ValueError: as :func:`load_bit`.
    """
    return {key: load_bit(secret, round_id, key, probability) for key in node_keys}


def pair_coverage(
    screening_rounds: int,
    min_rounds: int = 2,
    probability: float = 0.5,
    either_direction: bool = False,
) -> float:
    """Probability that a pair of nodes can be linked at all after ``screening_rounds``
    rounds of this schedule at load probability ``q`` (``probability``): each round puts
    the pair in one of four arms (both loaded ``q^2``, only the first and only the second
    ``q (1 - q)`` each, neither ``(1 - q)^2``), and a mutual contention edge needs at
    least ``min_rounds`` rounds in each of the first three (a partner-loaded and a
    partner-unloaded arm for each direction: ``DetectorConfig.mutual_min_rounds``, 1
    since session 8; 2 before and for the other detectors, ``DetectorConfig.min_rounds``).
    ``either_direction`` (``DetectorConfig.mutual_one_way``, session 9): one testable
    direction is enough, i.e. ``min_rounds`` both-loaded rounds and ``min_rounds`` in
    either one-loaded arm: 0.968 at 12 screening rounds and ``min_rounds`` 1, 0.990 at
    16. Exact multinomial sum.

    It bounds the recall of any detector on this design. At ``q = 1/2`` and
    ``min_rounds`` 2: 0.558 at 12 screening rounds (16 rounds with every 4th a full
    round), 0.973 at 24, 0.9999 at 48; at 1: 0.906 at 12, 0.997 at 24; at ``q = 2/3``
    and 2: 0.585 at 12, 0.962 at 24.

    Raises:
        ValueError: negative ``screening_rounds`` or ``min_rounds``, ``probability``
            outside (0, 1).
    """
    if screening_rounds < 0 or min_rounds < 0:
        raise ValueError("screening_rounds and min_rounds must be >= 0")
    _check_probability(probability)
    q = probability
    both, one, neither = q * q, q * (1 - q), (1 - q) ** 2
    n, total = screening_rounds, 0.0
    for a in range(min_rounds, n + 1):
        for b in range(0 if either_direction else min_rounds, n - a + 1):
            ways_ab = math.comb(n, a) * math.comb(n - a, b)
            low_c = 0 if either_direction and b >= min_rounds else min_rounds
            for c in range(low_c, n - a - b + 1):
                d = n - a - b - c
                total += (ways_ab * math.comb(n - a - b, c)
                          * both**a * one ** (b + c) * neither**d)  # fmt: skip
    return total


def rounds_for_coverage(
    target: float = 0.95,
    min_rounds: int = 2,
    limit: int = 512,
    probability: float = 0.5,
    either_direction: bool = False,
) -> int:
    """Fewest screening rounds whose :func:`pair_coverage` (at load probability
    ``probability``, ``either_direction`` as there) reaches ``target`` (at most
    ``limit``).

    Raises:
        ValueError: ``target`` or ``probability`` outside (0, 1).
    """
    if not 0.0 < target < 1.0:
        raise ValueError("target must be in (0, 1)")
    n = 3 * min_rounds
    while n < limit and pair_coverage(n, min_rounds, probability, either_direction) < target:
        n += 1
    return n
