"""The reference pool as the round runner sees it: who is to blame when a node gets no
canary (:func:`classify_skip`), and a warning when a fingerprint's pool runs low
(:func:`warn_low_pool`). Both read storage; run them in a worker thread."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from netcheck.config import Profile
from netcheck.coordinator.session import NodeSession
from netcheck.records import Verdict
from netcheck.storage import Store

log = logging.getLogger("netcheck.round")


def classify_skip(
    store: Store, profile: Profile, fingerprint_id: str, reason: str
) -> tuple[Verdict, str]:
    """Why a node got no job: its own fingerprint (profile-mismatch) or our references.

    A fingerprint with references, all spent, or a profile with no reference set at all,
    is the operator's problem (``unchecked``); a fingerprint unknown while the profile has
    references under another one is the node's (``profile-mismatch``).
    """
    build = f"build more with `netcheck reference build --profile {profile.name}`"
    if store.count_references(fingerprint_id) > 0:
        return Verdict.UNCHECKED, f"reference pool for this fingerprint used up: {build}"
    if store.count_references(profile=profile.name) == 0:
        return Verdict.UNCHECKED, f"no reference set for profile {profile.name}: {build}"
    return Verdict.PROFILE_MISMATCH, reason


#: Warn when fewer canaries than this many rounds' worth remain for a fingerprint.
LOW_POOL_ROUNDS = 10


def warn_low_pool(store: Store, profile: Profile, sessions: Sequence[NodeSession]) -> None:
    """Log a warning per fingerprint whose unspent canaries last fewer than
    :data:`LOW_POOL_ROUNDS` rounds for the nodes connected with it."""
    per_fp: dict[str, int] = {}
    for s in sessions:
        per_fp[s.fingerprint_id] = per_fp.get(s.fingerprint_id, 0) + 1
    for fp, n in per_fp.items():
        left = store.count_references(fp, unspent_only=True)
        need = profile.canaries_max * n
        if store.count_references(fp) > 0 and left < need * LOW_POOL_ROUNDS:
            log.warning(
                "reference pool for fingerprint %s is low: %d unspent canaries left, about "
                "%d round(s) for %d node(s); build more with `netcheck reference build "
                "--profile %s`", fp[:12], left, left // max(need, 1), n, profile.name,
            )  # fmt: skip
