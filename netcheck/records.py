"""Typed records shared by the layers (bottom layer: stdlib only).

Data that crosses a layer boundary (analysis <- storage, coordinator -> storage, web <-
storage) is defined here once, so that no lower layer imports its types from a higher
one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StoredRounds:
    """Rounds read back for analysis, oldest first.

    ``round_ids``: the rounds; ``kinds``/``schedules``: per round; ``results``: the raw
    ``results`` rows of those rounds (dicts with ``round_id``, ``node_key``,
    ``released_ns``, ``arrived_ns``, ``rtt_s``, ``session_id``, ``commitment``,
    ``signature``, ``error``).
    """

    round_ids: tuple[str, ...]
    kinds: dict[str, str]
    schedules: dict[str, dict[str, bool]]
    results: tuple[dict[str, Any], ...]
