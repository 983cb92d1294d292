"""Durable round writes: bounded retry with backoff, then the local spool, replayed
idempotently when the database is back (docs/spool.md).

:class:`Recorder` wraps a :class:`~netcheck.storage.store.Store` and a
:class:`~netcheck.storage.spool.Spool`. Its methods block (they sleep between
retries): call them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select, update

from netcheck.errors import StorageError, StorageUnavailable
from netcheck.records import Assignment, NodeOutcome, NodeRecord, RoundPlan, RoundStatus
from netcheck.storage.checks_backlog import ChecksBacklog, LateRound
from netcheck.storage.database import json_ready
from netcheck.storage.spool import Spool, round_problem
from netcheck.storage.spool_entries import outcome_entry, outcome_of, records_of, timings_entry
from netcheck.storage.store import Store
from netcheck.storage.tables import assignments, reference_prompts, rounds

log = logging.getLogger("netcheck.spool")

T = TypeVar("T")

#: Delays (seconds) between attempts of a write the database refused for now; the last
#: repeats until the retry budget is spent.
RETRY_DELAYS_S = (0.1, 0.2, 0.5, 1.0, 2.0)
#: Default retry budget of one write (seconds) before its records go to the spool.
RETRY_S = 10.0
#: Default interval of the background replay while the spool holds entries (seconds).
REPLAY_EVERY_S = 5.0


def spooled_status(
    rows: Sequence[Mapping[str, Any]], pending: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Round rows (dicts with ``round_id`` and ``status``) as shown to people: a round
    still ``planned`` in the database whose results wait in the spool (``pending``, from
    :meth:`Recorder.pending`) shows as ``spooled``, with ``spooled_at`` and
    ``spooled_reason``."""
    out = []
    for row in rows:
        entry = pending.get(str(row.get("round_id")))
        if entry is not None and row.get("status") == RoundStatus.PLANNED:
            row = {**row, "status": str(RoundStatus.SPOOLED), "spooled_at": entry["spooled_at"],
                   "spooled_reason": entry["reason"]}  # fmt: skip
        out.append(dict(row))
    return out


@dataclass
class ReplayReport:
    """One replay pass: entry ids written (``replayed``), still waiting for the database
    (``waiting``), refused for good (``failed``: id -> reason), spooled verdicts that
    differ from the stored ones (``conflicts``: ``round/node: spooled X, stored Y``) and
    unreadable lines (``bad``: line number, reason)."""

    replayed: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)


class Recorder:
    """Writes a round's results so that none that arrived is lost (docs/spool.md).

    Args:
        store: the database.
        spool_path: the local spool file (created on first use).
        retry_s: how long one write keeps retrying a locked or unreachable database
            before its records go to the spool (seconds).
        replay_every_s: interval of :meth:`run_replayer` while entries are pending.
    """

    def __init__(
        self,
        store: Store,
        spool_path: Path,
        *,
        retry_s: float = RETRY_S,
        replay_every_s: float = REPLAY_EVERY_S,
    ) -> None:
        self.store = store
        self.spool = Spool(spool_path)
        self.retry_s = retry_s
        self.replay_every_s = replay_every_s
        self.last_replay: ReplayReport | None = None
        self._replaying = threading.Lock()
        self._dirty = self.spool.path.exists()  # something may be pending
        #: checks-only entries held in memory, the order late checks run in
        self.backlog = ChecksBacklog(self.spool, self._spooled)

    def _spooled(self) -> None:
        self._dirty = True

    # -- writes --------------------------------------------------------------------

    def call(self, action: str, fn: Callable[[], T]) -> T:
        """``fn()``, retried with backoff while it raises :class:`StorageUnavailable`,
        for at most :attr:`retry_s` seconds (the last attempt may end later: a locked
        SQLite write waits up to its busy timeout).

        Raises:
            StorageUnavailable: still failing when the budget is spent.
            StorageError: any other storage failure, at once.
        """
        deadline = time.monotonic() + self.retry_s
        for attempt in range(1_000_000):
            try:
                return fn()
            except StorageUnavailable as exc:
                delay = RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)]
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("%s: %s; retrying in %.1f s", action, exc, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def record_plan(self, plan: RoundPlan, started_at: float) -> None:
        """``Store.record_plan`` with the bounded retry of :meth:`call`. A retry that
        finds the round already stored means an earlier attempt did commit although its
        client saw an error (a server restart during ``COMMIT``): that is success.

        Raises:
            StorageUnavailable: the database stayed locked or unreachable (nothing was
                stored: no job may be sent).
            StorageError: anything else (:meth:`Store.record_plan`).
        """
        failed_before = False

        def attempt() -> None:
            nonlocal failed_before
            try:
                self.store.record_plan(plan, started_at)
            except StorageUnavailable:
                failed_before = True
                raise
            except StorageError:
                if failed_before and self._round_exists(plan.round_id):
                    return
                raise

        self.call(f"record plan {plan.round_id}", attempt)
        if self._dirty:
            self.replay()

    def _round_exists(self, round_id: str) -> bool:
        with self.store._read(f"find round {round_id}") as conn:
            row = conn.execute(select(rounds.c.seq).where(rounds.c.round_id == round_id))
            return row.first() is not None

    def end_round(
        self,
        round_id: str,
        outcomes: Sequence[NodeOutcome],
        records: Mapping[str, NodeRecord],
        *,
        status: str | None,
        summary: Mapping[str, Any] | None = None,
        canary_ids: Collection[str] = (),
        part: str = "end",
        checks: bool = False,
    ) -> str:
        """Store a round's verdicts and evidence and, when ``status`` is given, its final
        status and summary; durably, before the caller acknowledges anything.

        Tries the database (:meth:`call`); if it stays locked or unreachable, appends
        everything to the spool (fsynced) and returns ``"spooled"``; else ``"recorded"``
        (and replays whatever the spool held, since the database is back).
        ``status=None`` stores verdicts only (a gateway's part of a cluster round;
        ``part`` names that part so each gateway's entry has its own id).
        ``checks=True``: the caller runs after-round checks on a recorded round; a
        spooled entry is marked so, and after its replay it stays in the spool until
        :meth:`mark_checked` (:meth:`unchecked` lists it).

        Raises:
            StorageError: a non-transient database failure (e.g. unknown round), or the
                spool cannot be written either (nothing is durable then).
        """
        finished_at = time.time()

        def direct() -> None:
            if outcomes or records:
                self.store.record_outcome(round_id, outcomes, records)
            if status is not None:
                self.store.finish_round(round_id, status, summary or {}, finished_at=finished_at)

        try:
            self.call(f"record round {round_id}", direct)
        except StorageUnavailable as exc:
            self.backlog.flush()  # entries of earlier rounds first: the spool keeps order
            self.spool.append({
                "type": "round", "id": f"{round_id}/{part}", "round_id": round_id,
                "outcomes": [outcome_entry(o) for o in outcomes],
                "timings": timings_entry(records), "status": status,
                "summary": json_ready(summary or {}), "finished_at": finished_at,
                "canary_ids": sorted(canary_ids), "spooled_at": time.time(), "reason": str(exc),
                **({"checks": True} if checks else {}),
            })  # fmt: skip
            self._dirty = True
            log.error(
                "round %s: database unavailable for %.1f s (%s): %d verdict(s) spooled to %s; "
                "replayed when the database is back", round_id, self.retry_s, exc,
                len(outcomes), self.spool.path,
            )  # fmt: skip
            return "spooled"
        if self._dirty:
            self.replay()
        return "recorded"

    def defer_checks(
        self, round_id: str, outcomes: Sequence[NodeOutcome], records: Mapping[str, NodeRecord]
    ) -> bool:
        """Keep a recorded round's after-round checks for later: they failed on a
        transient storage error, or an earlier round's checks wait. Appends an entry
        already marked replayed (its records are in the database), so :meth:`unchecked`
        lists it until :meth:`mark_checked`.

        If the spool cannot be written either, the entry is kept in memory (:attr:`held`),
        logged as an error, and appended before any later spool entry once the spool
        takes writes again (tried at every :meth:`checks_backlog` and spool append);
        :meth:`checks_backlog` lists it meanwhile, so its checks also run if the
        database comes back first. Returns whether the entry is durable (False: held in
        memory only). Never raises: the round's results are recorded, and its report
        must still reach the operator.
        """
        entry_id = f"{round_id}/checks"
        entry = {
            "type": "round", "id": entry_id, "round_id": round_id,
            "outcomes": [outcome_entry(o) for o in outcomes],
            "timings": timings_entry(records), "status": None, "summary": {},
            "finished_at": time.time(), "canary_ids": [], "spooled_at": time.time(),
            "reason": "after-round checks deferred", "checks": True,
        }  # fmt: skip
        try:
            self.backlog.flush()  # earlier rounds' entries first: the spool keeps their order
            self.spool.append(entry)
        except StorageError as exc:
            n = self.backlog.hold(entry)
            log.error(
                "round %s: its after-round checks wait, but the spool cannot be written "
                "(%s): they are held in memory only (%d round(s)), lost if the coordinator "
                "stops before the spool or the database takes them; no new round starts "
                "until then", round_id, exc, n,
            )  # fmt: skip
            return False
        self._dirty = True
        try:
            self.spool.mark_replayed(entry_id)
        except StorageError as exc:  # durable anyway: the replay rewrites nothing, marks it
            log.warning("round %s: checks entry spooled, its replayed marker not: %s",
                        round_id, exc)  # fmt: skip
        return True

    @property
    def held(self) -> list[str]:
        """Ids of checks-only entries held in memory only: the spool refused them
        (:meth:`defer_checks`); oldest first."""
        return self.backlog.held

    # -- replay ----------------------------------------------------------------------

    def pending(self) -> dict[str, dict[str, Any]]:
        """Round id -> its pending spool entry (the last one per round), read from the
        file; empty when nothing waits. Bad lines are ignored here (see :meth:`replay`).
        """
        if not self._dirty and not self.spool.path.exists():
            return {}
        return {e["round_id"]: e for e in self.spool.read().pending if not round_problem(e)}

    def unchecked(self) -> list[LateRound]:
        """The replayed rounds whose after-round checks have not been marked run
        (:meth:`mark_checked`), in spool order (the order the rounds ended), up to the
        first round whose checks wait for its replay (:meth:`checks_backlog`); empty when
        none waits.

        Raises:
            StorageError: the spool or the database cannot be read (a spool record that
                cannot be read gives a round with no records).
        """
        return self.checks_backlog()[0]

    def checks_backlog(self) -> tuple[list[LateRound], str | None]:
        """The rounds whose after-round checks may run now, in the order the rounds ended,
        and the spool entry id of the first round whose checks must run before any later
        one but cannot yet (its records still wait for their replay: the database
        refused it for now), or None. The list stops before that round: a later round
        is never checked before an earlier one (docs/spool.md). An entry whose replay
        failed for good (a bad record, an unknown round: :attr:`last_replay`'s
        ``failed``, logged there) cannot be checked and holds nothing up.

        Raises:
            StorageError: the spool or the database cannot be read (a spool record that
                cannot be read gives a round with no records).
        """
        held = self.backlog.flush_held()
        if not self._dirty and not held and not self.spool.path.exists():
            return [], None
        contents = self.spool.read()
        failed = self.last_replay.failed if self.last_replay is not None else {}
        return self.backlog.runnable(contents, failed, held, self.stored_plan)

    def mark_checked(self, entry_id: str) -> None:
        """Record durably that the after-round checks of the replayed entry ``entry_id``
        ran; retire the spool file if nothing else waits in it (checked once the last
        round listed by :meth:`unchecked` is marked, so marking n rounds reads the file
        once, not n times).

        Raises:
            StorageError: the spool cannot be written.
        """
        if not self.backlog.mark_checked(entry_id):
            return  # others listed by unchecked() still wait: the file stays anyway
        retired, _ = self.spool.retire_if_done()
        self._dirty = not retired and self.spool.path.exists()

    def stored_plan(self, round_id: str) -> RoundPlan | None:
        """The round's plan as stored (``rounds`` and ``assignments`` rows): prompts,
        canary ids and positions, job keys; canary answers are not stored (empty).
        ``None`` if the round is not stored.

        Raises:
            StorageError: the database failed.
        """
        with self.store._read(f"read plan of {round_id}") as conn:
            row = conn.execute(select(rounds).where(rounds.c.round_id == round_id)).first()
            if row is None:
                return None
            rows = conn.execute(
                select(assignments)
                .where(assignments.c.round_id == round_id)
                .order_by(assignments.c.node_key)
            ).all()
        jobs = tuple(
            Assignment(
                a.node_key,
                tuple(a.prompts),
                tuple(a.positions),
                tuple(a.canary_ids),
                tuple(() for _ in a.canary_ids),
                bytes.fromhex(a.job_key),
                bytes.fromhex(a.job_nonce),
            )  # fmt: skip
            for a in rows
        )
        skipped = tuple((str(k), str(why)) for k, why in row.skipped or ())
        return RoundPlan(round_id, row.profile, row.batch_size, row.max_new_tokens, jobs, skipped)

    def replay(self) -> ReplayReport:
        """Write every pending spool entry to the database, in file order, one
        transaction group per entry; stop at the first entry the database refuses for
        now (locked, unreachable). Idempotent: see docs/spool.md. A pass already running
        in another thread makes this one return an empty report.

        Raises:
            StorageError: the spool cannot be read or written.
        """
        report = ReplayReport()
        if not self._replaying.acquire(blocking=False):
            return report
        try:
            contents = self.spool.read()
            report.bad = contents.bad
            for i, entry in enumerate(contents.pending):
                if problem := round_problem(entry):
                    report.failed[entry["id"]] = problem
                    log.error("spool entry %s cannot be replayed: %s", entry["id"], problem)
                    continue
                try:
                    report.conflicts += self.apply(entry)
                except StorageUnavailable as exc:
                    report.waiting = [e["id"] for e in contents.pending[i:]]
                    log.info("spool replay waits: %s", exc)
                    break
                except (StorageError, KeyError, TypeError, ValueError) as exc:  # a bad record
                    report.failed[entry["id"]] = str(exc)
                    log.error("spool entry %s cannot be replayed: %s", entry["id"], exc)
                    continue
                self.spool.mark_replayed(entry["id"])
                report.replayed.append(entry["id"])
                log.warning("round %s: spooled records written to the database", entry["round_id"])
            for c in report.conflicts:
                log.error("spool replay conflict (stored verdict kept): %s", c)
            if not report.waiting and not report.failed:
                retired, _ = self.spool.retire_if_done()
                self._dirty = not retired and self.spool.path.exists()
            self.last_replay = report
            return report
        finally:
            self._replaying.release()

    def apply(self, entry: Mapping[str, Any]) -> list[str]:
        """Write one spool entry (idempotent); returns the conflicts found.

        Raises:
            StorageUnavailable: the database is locked or unreachable (try later).
            StorageError: the entry cannot be written (e.g. its round is unknown).
        """
        round_id = entry["round_id"]
        outcomes = [outcome_of(d) for d in entry["outcomes"]]
        if outcomes or entry["timings"]:
            records, round_timing = records_of(entry["timings"])
            self.store.record_outcome(round_id, outcomes, records, round_timing)
        if entry["canary_ids"]:
            self._ensure_spent(round_id, entry["canary_ids"])
        if entry["status"] is not None:
            status = entry["status"]
            if status == RoundStatus.COMPLETE:
                status = RoundStatus.RECORDED_LATE
            late = {"spooled_at": entry["spooled_at"], "replayed_at": time.time(),
                    "reason": entry["reason"]}  # fmt: skip
            self.store.finish_round(
                round_id, str(status), {**entry["summary"], "recorded_late": late},
                finished_at=entry["finished_at"], only_open=True,
            )  # fmt: skip
        if not outcomes:
            return []
        stored = {v["node_key"]: v["verdict"] for v in self.store.round_verdicts(round_id)}
        return [
            f"{round_id}/{o.node_key}: spooled {o.verdict}, stored {stored.get(o.node_key)}"
            for o in outcomes
            if stored.get(o.node_key) != str(o.verdict)
        ]

    def _ensure_spent(self, round_id: str, ids: Sequence[str]) -> None:
        """Mark the round's canaries spent where they are not (a no-op normally: the
        plan's transaction spent them)."""
        t = reference_prompts
        with self.store._write(f"spend canaries of {round_id}") as conn:
            for i in range(0, len(ids), 500):
                conn.execute(
                    update(t)
                    .where(t.c.ref_id.in_(list(ids[i : i + 500])), t.c.spent_round.is_(None))
                    .values(spent_round=round_id)
                )

    async def run_replayer(
        self, stop: asyncio.Event, after: Callable[[], Awaitable[object]] | None = None
    ) -> None:
        """Replay every :attr:`replay_every_s` while the spool may hold entries, until
        ``stop`` is set; after each pass, ``after()`` (the coordinator's after-round
        checks of the replayed rounds, :meth:`unchecked`). Never raises (a failed pass
        is logged and tried again)."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.replay_every_s)
                return
            except TimeoutError:
                pass
            if not self._dirty and not self.backlog.holds_any():
                continue
            try:
                await asyncio.to_thread(self.replay)
            except StorageError as exc:
                log.error("spool replay failed: %s", exc)
                continue
            if after is not None:
                try:
                    await after()
                except Exception:  # the replayer must keep running; logged with its trace
                    log.exception("after-round checks of replayed rounds failed")
