"""Flag reviews: an analyst's lifecycle of a flag, kept apart from the detector's status.

The detector sets a flag's ``status`` (``pending``, ``confirmed``, ``cleared``); the
analyst moves its *review state* through

    open -> acknowledged -> resolved | false-positive      (reopen: back to open)

(``resolved`` or ``false-positive`` may also follow ``open`` directly). Every change is
a row of ``flag_reviews`` (who, when, a note), never an update, so the history stays.
A flag with no row is ``open``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import insert, select

from netcheck.errors import NetcheckError
from netcheck.storage.flags import FlagStore
from netcheck.storage.store import Store
from netcheck.storage.tables import MAX_BY_CHARS, flag_reviews, flags, metadata

REVIEW_STATES = ("open", "acknowledged", "resolved", "false-positive")
#: state -> the states it may move to.
TRANSITIONS = {
    "open": ("acknowledged", "resolved", "false-positive"),
    "acknowledged": ("resolved", "false-positive", "open"),
    "resolved": ("open",),
    "false-positive": ("open",),
}
MAX_NOTE_CHARS = 2000


class ReviewError(NetcheckError):
    """A review change that is not allowed (unknown flag, state or transition)."""


class ReviewStore:
    """Review rows next to a :class:`FlagStore` (creates ``flag_reviews`` if missing)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.flags = FlagStore(store)
        with store._write("create flag_reviews") as conn:
            metadata.create_all(conn, tables=[flag_reviews])

    def review(self, flag_id: int, state: str, by: str, note: str = "") -> dict[str, Any]:
        """Move a flag to ``state``; returns the new review row.

        Raises:
            ReviewError: unknown flag, unknown state, a transition not in
                :data:`TRANSITIONS`, an empty ``by`` or a too-long ``by``/``note``.
            StorageError: the database failed.
        """
        if state not in REVIEW_STATES:
            raise ReviewError(f"unknown review state {state!r}; one of {', '.join(REVIEW_STATES)}")
        if not by.strip() or len(by) > MAX_BY_CHARS:
            raise ReviewError(f"by must name who reviews (1..{MAX_BY_CHARS} characters)")
        if len(note) > MAX_NOTE_CHARS:
            raise ReviewError(f"note is longer than {MAX_NOTE_CHARS} characters")
        row = {
            "flag_id": flag_id,
            "state": state,
            "by": by.strip(),
            "note": note,
            "at": time.time(),
        }
        with self.store._write("review flag") as conn:
            if (
                conn.execute(select(flags.c.flag_id).where(flags.c.flag_id == flag_id)).first()
                is None
            ):
                raise ReviewError(f"no flag {flag_id}")
            last = conn.execute(
                select(flag_reviews.c.state)
                .where(flag_reviews.c.flag_id == flag_id)
                .order_by(flag_reviews.c.id.desc())
                .limit(1)
            ).scalar()
            current = last or "open"
            if state not in TRANSITIONS[current]:
                raise ReviewError(
                    f"flag {flag_id} is {current}: it can go to {', '.join(TRANSITIONS[current])}"
                )
            conn.execute(insert(flag_reviews).values(**row))
        return row

    def history(self, flag_id: int) -> list[dict[str, Any]]:
        """Review rows of one flag, oldest first."""
        t = flag_reviews
        query = select(t.c.state, t.c.by, t.c.note, t.c.at).where(t.c.flag_id == flag_id)
        with self.store._read("read flag reviews") as conn:
            return [dict(r._mapping) for r in conn.execute(query.order_by(t.c.id))]

    def histories(self, flag_ids: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
        """flag id -> its review rows (``state``, ``by``, ``note``, ``at``), oldest first
        (as :meth:`history`); ``[]`` for a flag never reviewed."""
        ids = list(flag_ids)
        out: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
        if not ids:
            return out
        t = flag_reviews
        query = (
            select(t.c.flag_id, t.c.state, t.c.by, t.c.note, t.c.at)
            .where(t.c.flag_id.in_(ids))
            .order_by(t.c.id)
        )
        with self.store._read("read flag reviews") as conn:
            for r in conn.execute(query):
                out[r.flag_id].append({"state": r.state, "by": r.by, "note": r.note, "at": r.at})
        return out

    def current(self, flag_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """flag id -> its latest review row (``state``, ``by``, ``note``, ``at``); flags
        never reviewed map to ``{"state": "open"}``."""
        return {
            i: rows[-1] if rows else {"state": "open"}
            for i, rows in self.histories(flag_ids).items()
        }
