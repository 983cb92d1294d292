"""What the flag pages show, from a row of the ``flags`` table (netcheck/storage/flags.py).

The screening work owns that table: ``flag_id``, ``kind`` (``shared-backend``,
``capacity``, ``result-sharing``, ``relay``), ``status``, ``profile``, ``node_keys``,
``created_at``, ``statistic``, ``threshold`` and an ``evidence`` JSON document whose shape
depends on the kind. The pages pick out a few facts, looking in the row first, then in
the evidence and its ``screening``/``confirmation`` parts (first match wins), and show
the whole stored row as well, so nothing is hidden:

- id: ``flag_id`` | ``id``; detector: ``kind`` | ``detector``
- members: ``node_keys`` | ``members`` | ``group`` | ``node_key`` | the edges' ``a``/``b``
- statistic / threshold: ``statistic`` | ``stat`` and ``threshold`` | ``p_threshold``
- rule: :func:`netcheck.analysis.rules.rule_text` of the kind and the evidence's
  parameters (plain words, with units); for an unknown kind, the evidence's ``rule``
- rounds: every round id in ``rounds``, ``round_id``, ``screening.rounds`` and
  ``confirmation.rounds[].round_id``
- edges: ``edges`` | ``screening.edges`` (detector edges with their statistic)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netcheck.analysis.rules import rule_text

#: Plain column names of the screening edges on a flag page (the stored key stays the
#: cell's title).
EDGE_HEADERS = {
    "a": "node", "b": "partner", "detector": "test", "statistic": "statistic",
    "df": "degrees of freedom", "p_value": "p-value", "p_threshold": "p-value must be below",
    "effect": "effect (log slowdown, or r)", "effect_floor": "effect must exceed",
    "n_rounds": "rounds used",
}  # fmt: skip
#: What each screening test measures (docs/detection.md "Analysis").
EDGE_TESTS = {
    "A": "slower when the partner is loaded (log service time)",
    "A-welch": "slower when the partner is loaded (pairwise Welch)",
    "A-group": "slower with the number of its partners loaded",
    "A-reverse": "the partner's row, tested the other way round",
    "A-mutual": "both slower when the other is loaded (the two rows combined)",
    "B": "slowdowns move together (correlation r)",
}


@dataclass(frozen=True)
class FlagView:
    """One flag as the dashboard shows it; ``row`` is the stored row, untouched."""

    flag_id: str
    members: tuple[str, ...]
    detector: str
    status: str
    created_at: float | None
    statistic: float | None
    threshold: float | None
    round_ids: tuple[str, ...] | None
    edges: tuple[dict[str, Any], ...]
    rule: str = ""
    row: dict[str, Any] = field(default_factory=dict)


def _json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _first(sources: Sequence[Mapping[str, Any]], *names: str) -> Any:
    for src in sources:
        for name in names:
            value = src.get(name)
            if value is not None and value != "":
                return _json(value)
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _keys(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence):
        return [str(v) for v in value if isinstance(v, str)]
    return []


def _round_ids(sources: Sequence[Mapping[str, Any]]) -> list[str]:
    out: list[str] = []
    for src in sources:
        for name in ("round_ids", "rounds", "round_id"):
            value = _json(src.get(name))
            items = value if isinstance(value, list) else [value]
            for item in items:
                rid = item.get("round_id") if isinstance(item, Mapping) else item
                if isinstance(rid, str) and rid not in out:
                    out.append(rid)
    return out


def flag_view(row: Mapping[str, Any]) -> FlagView:
    """Map a stored flag row (any of the spellings above) to a :class:`FlagView`."""
    row = dict(row)
    evidence = _json(row.get("evidence"))
    ev: Mapping[str, Any] = evidence if isinstance(evidence, Mapping) else {}
    parts = [ev.get(k) for k in ("screening", "confirmation")]
    nested = [p for p in parts if isinstance(p, Mapping)]
    sources = (row, ev, *nested)
    members = _keys(_first(sources, "node_keys", "members", "nodes", "group"))
    if not members:
        for a, b in (("node_a", "node_b"), ("a", "b")):
            pair = [_first(sources, a), _first(sources, b)]
            members = [k for k in pair if isinstance(k, str)]
            if members:
                break
    if not members:
        members = _keys(_first(sources, "node_key"))
    raw_edges = _first(sources, "edges")
    edges = tuple(
        dict(e)
        for e in (raw_edges if isinstance(raw_edges, list) else [])
        if isinstance(e, Mapping)
    )
    for e in edges:  # members named only by edges
        for k in _keys([e.get("a"), e.get("b")]):
            if k not in members:
                members.append(k)
    statistic = _number(_first(sources, "statistic", "stat"))
    threshold = _number(_first(sources, "threshold", "p_threshold", "critical"))
    if statistic is None and edges:
        strongest = max(edges, key=lambda e: _number(e.get("statistic")) or float("-inf"))
        statistic = _number(strongest.get("statistic"))
        if threshold is None:
            threshold = _number(strongest.get("p_threshold"))
    rids = _round_ids(sources)
    kind = str(_first(sources[:1], "kind", "detector") or "flag")
    # the plain-language rule from the evidence's parameters (also for flags stored
    # before the wording changed); a kind it does not know keeps its stored text
    rule = rule_text(kind, ev, threshold) or ev.get("rule")
    return FlagView(
        flag_id=str(_first(sources[:1], "flag_id", "id") or ""),
        members=tuple(dict.fromkeys(members)),
        detector=kind,
        status=str(_first(sources[:1], "status", "state") or ""),
        created_at=_number(_first(sources[:1], "created_at", "raised_at", "recorded_at")),
        statistic=statistic,
        threshold=threshold,
        round_ids=tuple(rids) or None,
        edges=edges,
        rule=rule if isinstance(rule, str) else "",
        row=row,
    )
