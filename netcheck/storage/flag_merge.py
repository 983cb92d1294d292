"""One open flag per node set and behaviour: a repeat finding adds to it.

A detector that finds the same behaviour of the same nodes again (a node late in window
after window, a pair whose answers match again) must not raise flag after flag
(#1, #3, #5 for one proxy). :func:`raise_flag` looks, in the same write transaction,
for a flag with the same ``kind``, ``profile`` and node set whose detector status is
not ``cleared`` and whose review state (netcheck/storage/reviews.py) is still ``open``
or ``acknowledged``. If there is one, the new finding is merged into it:

- ``evidence``: merged recursively: mappings key by key, lists as the union in order
  (so ``rounds``, ``strike_rounds``, ``receipts`` and latencies accumulate), any other
  value from the newer finding; plus ``occurrences``, one entry per finding (``at``,
  ``statistic``, ``threshold``, ``status``, ``rounds``);
- ``statistic``/``threshold``: the newer finding's;
- ``status``: ``confirmed`` once any finding confirmed it (a ``pending`` relay flag
  that is then confirmed becomes ``confirmed``).

Otherwise (no such flag, or the earlier one was resolved or marked a false positive) a
new flag is stored. ``cleared`` records (suspect groups that confirmation cleared) are
never merged: they are records of a test, not open findings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import insert, select, update

from netcheck.records import FlagStatus
from netcheck.storage.flags import FLAG_STATUSES, FlagStore, _finite, flags, jsonable
from netcheck.storage.reviews import ReviewStore, flag_reviews

#: Review states in which a flag still takes new evidence.
OPEN_REVIEW_STATES = ("open", "acknowledged")


def merge_evidence(old: Any, new: Any) -> Any:
    """``old`` and ``new`` evidence merged: mappings recursively, lists as their union in
    order (equal JSON items once), other values from ``new``."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out = dict(old)
        for k, v in new.items():
            out[k] = merge_evidence(old[k], v) if k in old else v
        return out
    if isinstance(old, list) and isinstance(new, list):
        seen = {json.dumps(x, sort_keys=True) for x in old}
        out_list = list(old)
        for x in new:
            key = json.dumps(x, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out_list.append(x)
        return out_list
    return new


def _occurrence(
    at: float, statistic: float | None, threshold: float | None, status: str, evidence: Any
) -> dict[str, Any]:
    rounds = evidence.get("rounds", []) if isinstance(evidence, Mapping) else []
    return {"at": at, "statistic": statistic, "threshold": threshold, "status": status,
            "rounds": list(rounds) if isinstance(rounds, list) else []}  # fmt: skip


def raise_flag(
    store: FlagStore,
    kind: str,
    status: str,
    profile: str,
    node_keys: Collection[str],
    statistic: float | None,
    threshold: float | None,
    evidence: Mapping[str, Any],
    *,
    created_at: float | None = None,
) -> tuple[int, bool]:
    """Store a finding as a new flag or add it to the open flag of the same behaviour;
    returns ``(flag_id, new)``.

    Raises:
        ValueError: unknown ``status`` or no node keys.
        StorageError: the database failed.
    """
    if status == FlagStatus.CLEARED:
        return store.add_flag(kind, status, profile, node_keys, statistic, threshold, evidence,
                              created_at=created_at), True  # fmt: skip
    if status not in FLAG_STATUSES:
        raise ValueError(f"flag status must be one of {FLAG_STATUSES}, got {status!r}")
    if not node_keys:
        raise ValueError("a flag names at least one node")
    ReviewStore(store.store)  # creates flag_reviews if missing
    members = sorted(set(node_keys))
    at = time.time() if created_at is None else created_at
    doc = jsonable(evidence)
    assert isinstance(doc, dict)
    with store.store._write(f"raise {kind} flag") as conn:
        candidates = conn.execute(
            select(flags.c.flag_id, flags.c.node_keys, flags.c.status)
            .where(flags.c.kind == kind, flags.c.profile == profile,
                   flags.c.status != str(FlagStatus.CLEARED))
            .order_by(flags.c.flag_id.desc())
        ).all()  # fmt: skip
        for cand in candidates:
            if sorted(cand.node_keys) != members:
                continue
            state = conn.execute(
                select(flag_reviews.c.state)
                .where(flag_reviews.c.flag_id == cand.flag_id)
                .order_by(flag_reviews.c.id.desc())
                .limit(1)
            ).scalar()
            if (state or "open") not in OPEN_REVIEW_STATES:
                continue
            row = conn.execute(select(flags).where(flags.c.flag_id == cand.flag_id)).one()
            old = dict(row.evidence) if isinstance(row.evidence, Mapping) else {}
            occurrences = old.get("occurrences") or [
                _occurrence(row.created_at, row.statistic, row.threshold, row.status, old)
            ]
            merged = merge_evidence({k: v for k, v in old.items() if k != "occurrences"}, doc)
            merged["occurrences"] = [
                *occurrences, _occurrence(at, _finite(statistic), _finite(threshold), status, doc)
            ]  # fmt: skip
            confirmed = str(FlagStatus.CONFIRMED) in (row.status, status)
            conn.execute(
                update(flags)
                .where(flags.c.flag_id == cand.flag_id)
                .values(
                    status=str(FlagStatus.CONFIRMED) if confirmed else status,
                    statistic=_finite(statistic),
                    threshold=_finite(threshold),
                    evidence=merged,
                )
            )
            return int(cand.flag_id), False
        res = conn.execute(
            insert(flags).values(
                kind=kind, status=status, profile=profile, node_keys=members, created_at=at,
                statistic=_finite(statistic), threshold=_finite(threshold), evidence=doc,
            )
        )  # fmt: skip
        key = res.inserted_primary_key
        assert key is not None
        return int(key[0]), True
