"""Which engine-fingerprint fields make a node's fingerprint differ from the references
(pure), e.g. ``cpu_threads: node 2, references 1``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_FIELDS = 6


def fingerprint_diff(node: Mapping[str, Any], reference: Mapping[str, Any]) -> list[str]:
    """``"field: node X, references Y"`` for every field whose value differs or that
    only one side has, sorted by field name."""
    out = []
    for key in sorted(set(node) | set(reference)):
        a, b = node.get(key, "(absent)"), reference.get(key, "(absent)")
        if a != b:
            out.append(f"{key}: node {a}, references {b}")
    return out


def explain_mismatch(node: Mapping[str, Any], references: Mapping[str, Mapping[str, Any]]) -> str:
    """The differing fields against the closest reference set (fewest differences), or
    "" when no reference fingerprint is stored (references built before it was kept)."""
    if not references:
        return ""
    diffs = sorted((fingerprint_diff(node, ref), fp_id) for fp_id, ref in references.items())
    fields, fp_id = diffs[0]
    shown = "; ".join(fields[:MAX_FIELDS]) + ("; ..." if len(fields) > MAX_FIELDS else "")
    return f"differs from reference set {fp_id[:12]} in {shown}"
