"""The reference pool as the coordinator sees it: who is to blame when a node gets no
canary (:func:`classify_skip`), a warning when a fingerprint's pool runs low
(:func:`warn_low_pool`), and the live pool for operators (:func:`live_pool`: stored
counts joined with the connected nodes; :mod:`netcheck.references.pool` does the
arithmetic). All read storage; run them in a worker thread."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from netcheck.config import Profile
from netcheck.coordinator.session import NodeSession
from netcheck.records import Verdict
from netcheck.references.mismatch import explain_mismatch
from netcheck.references.pool import PoolEntry, pool_status
from netcheck.storage import Store

log = logging.getLogger("netcheck.round")


def classify_skip(
    store: Store,
    profile: Profile,
    fingerprint_id: str,
    reason: str,
    fingerprint: Mapping[str, Any] | None = None,
) -> tuple[Verdict, str]:
    """Why a node got no job: its own fingerprint (profile-mismatch) or our references.

    A fingerprint with references, all spent, or a profile with no reference set at all,
    is the operator's problem (``unchecked``); a fingerprint unknown while the profile has
    references under another one is the node's (``profile-mismatch``); its reason then
    names the fingerprint fields that differ from the closest stored reference set.
    """
    build = f"build more with `netcheck reference build --profile {profile.name}`"
    if store.count_references(fingerprint_id) > 0:
        return Verdict.UNCHECKED, f"reference pool for this fingerprint used up: {build}"
    if store.count_references(profile=profile.name) == 0:
        return Verdict.UNCHECKED, f"no reference set for profile {profile.name}: {build}"
    why = explain_mismatch(fingerprint or {}, store.reference_fingerprints(profile.name))
    return Verdict.PROFILE_MISMATCH, f"{reason}: {why}" if why else reason


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


def live_pool(
    store: Store, profiles: Mapping[str, Profile], sessions: Mapping[str, NodeSession]
) -> list[PoolEntry]:
    """Pool entries for every stored (profile, fingerprint) and every connected one
    (``sessions``: the coordinator's live session table, read once here).

    Raises:
        StorageError: the database failed.
    """
    live = list(sessions.values())  # one C-level copy: safe from a thread
    connected = Counter((s.claim.profile, s.fingerprint_id) for s in live)
    return pool_status(store.reference_pool(), profiles, connected)


def pool_shortfall(
    store: Store, profile: Profile, loads: Mapping[str, int], fingerprints: Mapping[str, str]
) -> list[str]:
    """The fingerprints whose unspent canaries of ``profile`` cannot cover ``loads``
    (node key -> rounds that load it; each load draws at most ``canaries_max``), as
    ``"<fp[:12]>: N unspent, M needed"``; empty when the pool covers them. Used before
    a confirmation block (:mod:`netcheck.coordinator.confirm_batches`): a member that
    gets no canary gets no job and no timing (``unchecked``). A fingerprint with no
    reference of the profile while the profile has some under another is the node's
    mismatch (:func:`classify_skip`), not a short pool: left out.

    Args:
        loads: node key -> loaded rounds of the block.
        fingerprints: node key -> fingerprint id (the connected sessions'); keys
            missing here are left out.
    """
    need: Counter[str] = Counter()
    for key, n in loads.items():
        if key in fingerprints:
            need[fingerprints[key]] += n * profile.canaries_max
    short = []
    any_refs: bool | None = None
    for fp, want in sorted(need.items()):
        left = store.count_references(fp, unspent_only=True, profile=profile.name)
        if left >= want:
            continue
        if store.count_references(fp, profile=profile.name) == 0:
            if any_refs is None:
                any_refs = store.count_references(profile=profile.name) > 0
            if any_refs:
                continue  # profile-mismatch: the node's fingerprint, not our pool
        short.append(f"fingerprint {fp[:12]}: {left} unspent canaries, {want} needed")
    return short
