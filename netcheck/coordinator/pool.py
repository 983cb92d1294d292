"""The coordinator's live canary pool: stored reference counts joined with the
connected nodes (:mod:`netcheck.references.pool` does the arithmetic)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from netcheck.references.pool import PoolEntry, pool_status

if TYPE_CHECKING:
    from netcheck.coordinator.server import Coordinator


def live_pool(coord: Coordinator) -> list[PoolEntry]:
    """Pool entries for every stored (profile, fingerprint) and every connected one.

    Reads the database (blocking: call it in a thread from async code).

    Raises:
        StorageError: the database failed.
    """
    sessions = list(coord.sessions.values())  # one C-level copy: safe from a thread
    connected = Counter((s.claim.profile, s.fingerprint_id) for s in sessions)
    return pool_status(coord.store.reference_pool(), coord.profiles, connected)
