"""Screening coins in confirmation rounds (pure): docs/screening-in-confirmation.md.

A confirmation round loads the nodes its runs plan (the *held* nodes: every member of
a run under way) and, with coins on, every other connected node with the screening
schedule's bit for that round id (:func:`netcheck.analysis.schedule.load_bit`: a fair
coin under the secret, HMAC-SHA256, RFC 2104). Among the coin nodes such a round is a
screening round, so the screening analysis reads it too, with the held nodes' service
times left out (their loads follow the confirmation plan, not coins; their load bits
stay, because a coin node's farm sibling among them slows it whenever the plan loads
it, which is evidence, and a plan drawn before the round is independent of every coin
node's noise).

Stored form (docs/protocol.md "Round schedules"): kind ``confirmation``, rule
:data:`COIN_RULE`, and the context key ``"coins": {"rule": HMAC_RULE, "held": [...]}``
beside the runs' entries.

- :func:`coin_load_rule`: the load rule for :func:`netcheck.coordinator.rounds.run_round`.
- :func:`coin_context`, :func:`held_nodes`: write and read the context entry.
- :func:`screen_round_ids`: the rounds of a stored window that screening reads.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from netcheck.analysis.schedule import HMAC_RULE, load_bit
from netcheck.records import RoundKind, StoredRounds

COIN_RULE = "explicit+" + HMAC_RULE


def coin_load_rule(
    secret: bytes, planned: Collection[str], held: Collection[str]
) -> Callable[[str, Sequence[str]], set[str]]:
    """The load rule of a confirmation round with coins: ``(round_id, node_keys) ->``
    the ``planned`` keys (the runs' loads of this round) plus every key of
    ``node_keys`` outside ``held`` whose screening bit for ``round_id`` is set.

    Raises (when called):
        ValueError: a ``planned`` key not in ``held`` (a run's load outside the runs'
            members would mix a plan into the coins), or as
            :func:`~netcheck.analysis.schedule.load_bit`.
    """
    planned, held = frozenset(planned), frozenset(held)
    if planned - held:
        raise ValueError("planned loads must be held nodes")

    def rule(round_id: str, node_keys: Sequence[str]) -> set[str]:
        coins = {k for k in node_keys if k not in held and load_bit(secret, round_id, k)}
        return set(planned & set(node_keys)) | coins

    return rule


def coin_context(held: Collection[str]) -> dict[str, Any]:
    """The context entry of a coin round: ``{"coins": {"rule", "held"}}`` (held sorted)."""
    return {"coins": {"rule": HMAC_RULE, "held": sorted(held)}}


def held_nodes(context: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The held nodes of a stored round's ``context`` if it carries screening coins
    (:func:`coin_context` with the rule this version draws), else None (not a coin
    round, an unknown rule, or a malformed entry: such a round is not read as
    screening)."""
    coins = context.get("coins") if isinstance(context, Mapping) else None
    if not isinstance(coins, Mapping) or coins.get("rule") != HMAC_RULE:
        return None
    held = coins.get("held")
    if not isinstance(held, list) or not all(isinstance(k, str) for k in held):
        return None
    return frozenset(held)


def screen_round_ids(stored: StoredRounds, *, full: bool) -> list[str]:
    """The rounds of ``stored`` that screening reads, in order: ``screening`` rounds,
    ``full`` rounds when ``full``, and confirmation rounds with coins
    (:func:`held_nodes` not None)."""
    out = []
    for rid in stored.round_ids:
        kind = stored.kinds.get(rid, RoundKind.SCREENING)
        if (
            kind == RoundKind.SCREENING
            or (full and kind == RoundKind.FULL)
            or kind == RoundKind.CONFIRMATION
            and held_nodes(stored.contexts.get(rid)) is not None
        ):
            out.append(rid)
    return out
