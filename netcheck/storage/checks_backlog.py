"""The after-round checks a :class:`~netcheck.storage.durable.Recorder` keeps for later
(docs/spool.md, "After-round checks of a spooled round"): which rounds' checks may run
now, in the order the rounds ended, and the checks-only entries held in memory while
the spool refuses them. No SQL here: the Recorder reads the spool and the stored plans
and hands them in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from netcheck.errors import StorageError
from netcheck.records import NodeOutcome, NodeRecord, RoundPlan
from netcheck.storage.spool import Spool, SpoolContents, round_problem
from netcheck.storage.spool_entries import outcome_of, records_of

log = logging.getLogger("netcheck.spool")


@dataclass(frozen=True)
class LateRound:
    """A replayed round whose after-round checks have not run (``Recorder.unchecked``):
    its spool entry id, its plan as stored (prompts per node, no canary answers: the
    checks do not read them; ``None`` if the round row is gone) and what the round
    produced, as the spool entry holds it."""

    entry_id: str
    round_id: str
    plan: RoundPlan | None
    outcomes: tuple[NodeOutcome, ...]
    records: Mapping[str, NodeRecord]


class ChecksBacklog:
    """The checks-only entries held in memory and the rounds whose checks wait.

    Args:
        spool: the Recorder's spool.
        spooled: called whenever a held entry reaches the spool (the Recorder's spool
            then holds something).
    """

    def __init__(self, spool: Spool, spooled: Callable[[], None]) -> None:
        self.spool = spool
        self._spooled = spooled
        # ids listed by the last runnable() and not marked since (None: not known);
        # mark_checked says to retire the file only once none is left, not at each
        # mark (a read of the whole file each: minutes at start-up after a long outage)
        self._checks_left: set[str] | None = None
        # checks-only entries (defer_checks) the spool refused: in memory only, oldest
        # first, appended to the spool before anything else is (order kept), or run and
        # dropped (mark_checked); lost if the process dies meanwhile (docs/spool.md)
        self._held: list[dict[str, Any]] = []
        self._held_lock = threading.Lock()

    @property
    def held(self) -> list[str]:
        """Ids of the entries held in memory only, oldest first."""
        with self._held_lock:
            return [e["id"] for e in self._held]

    def holds_any(self) -> bool:
        """Whether an entry is held in memory (read without the lock)."""
        return bool(self._held)

    def hold(self, entry: dict[str, Any]) -> int:
        """Keep a checks-only entry the spool refused; returns how many are held."""
        with self._held_lock:
            self._held.append(entry)
            return len(self._held)

    def flush(self) -> None:
        """Append the held entries to the spool, oldest first, each marked replayed.

        Raises:
            StorageError: the spool still refuses (the rest stay held, in order).
        """
        with self._held_lock:
            while self._held:
                entry = self._held[0]
                self.spool.append(entry)
                self._held.pop(0)
                self._spooled()
                log.warning("round %s: after-round checks held in memory are now in the "
                            "spool", entry["round_id"])  # fmt: skip
                try:
                    self.spool.mark_replayed(entry["id"])
                except StorageError as exc:  # the replay marks it (its records are stored)
                    log.warning("spool entry %s: replayed marker not written: %s",
                                entry["id"], exc)  # fmt: skip

    def flush_held(self) -> list[dict[str, Any]]:
        """:meth:`flush` if anything is held, an error logged if the spool still refuses;
        returns the entries still held (later than every spool entry), oldest first."""
        if self._held:
            try:
                self.flush()
            except StorageError as exc:
                log.error("after-round checks of %d round(s) still held in memory: %s",
                          len(self._held), exc)  # fmt: skip
        with self._held_lock:
            return list(self._held)

    def runnable(
        self,
        contents: SpoolContents,
        failed: Collection[str],
        held: list[dict[str, Any]],
        stored_plan: Callable[[str], RoundPlan | None],
    ) -> tuple[list[LateRound], str | None]:
        """The rounds of ``contents`` (then those ``held``) whose checks may run now, in
        the order the rounds ended, and the id of the first entry whose records still
        wait for their replay (the list stops before it), or None; entries whose replay
        failed for good (``failed``) hold nothing up. Plans are read by ``stored_plan``.
        """
        entries: list[dict[str, Any]] = []
        waits_for = None
        for e in contents.checks:
            if e["id"] in contents.replayed:
                entries.append(e)
            elif not round_problem(e) and e["id"] not in failed:
                waits_for = e["id"]
                break
        if waits_for is None:
            entries += held
        self._checks_left = {e["id"] for e in entries}
        out: list[LateRound] = []
        for e in entries:
            try:
                records, _ = records_of(e["timings"])
            except StorageError as exc:
                log.error("round %s: %s", e["round_id"], exc)
                records = {}
            outcomes = tuple(outcome_of(d) for d in e["outcomes"])
            out.append(LateRound(e["id"], e["round_id"], stored_plan(e["round_id"]),
                                 outcomes, records))  # fmt: skip
        return out, waits_for

    def mark_checked(self, entry_id: str) -> bool:
        """Mark the checks of ``entry_id`` run (in the spool, or by dropping it if it is
        held); returns False while other rounds listed by :meth:`runnable` still wait
        (the spool file stays anyway), True when the file may be retired.

        Raises:
            StorageError: the spool cannot be written.
        """
        with self._held_lock:
            kept = [e for e in self._held if e["id"] != entry_id]
            was_held, self._held = len(kept) < len(self._held), kept
        if not was_held:  # a held entry never reached the spool: nothing to mark there
            self.spool.mark_checked(entry_id)
        if self._checks_left is not None:
            self._checks_left.discard(entry_id)
            if self._checks_left:
                return False
        return True
