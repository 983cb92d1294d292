"""Detection storage: round schedules and flags (with evidence), next to :class:`Store`.

Two tables, defined in :mod:`netcheck.storage.tables` with every other table (so any
process that opens the database creates the same schema, whatever it imported):

- ``round_schedules``: one row per round: its ``kind`` (``full``, ``screening``,
  ``confirmation``), the ``rule`` that produced its load bits and the full schedule
  ``{node_key: loaded}`` over every node connected with the profile, loaded or not, so
  the detectors see unloaded nodes too. Written right after the plan, before any job
  reaches a node.
- ``flags``: findings against nodes (``shared-backend``, ``capacity``,
  ``result-sharing``, ``relay``), each with the statistic, the threshold and an
  ``evidence`` JSON document (rounds, schedule bits, latencies, receipts) from which an
  analyst can re-check it without trusting netcheck.

:class:`FlagStore` wraps a :class:`~netcheck.storage.store.Store` (its engine and its
transaction helpers, so SQLite writers queue and errors map to
:class:`~netcheck.errors.StorageError` the same way) and creates the two tables if
missing. Timing columns are read back raw, exactly as ``results`` holds them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Select,
    and_,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)

from netcheck.records import Flag, FlagStatus, RoundKind, StoredRounds
from netcheck.storage.store import Store
from netcheck.storage.tables import (
    MAX_ROW_ID,
    flags,
    metadata,
    results,
    round_schedules,
    rounds,
    verdicts,
)

ROUND_KINDS = tuple(k.value for k in RoundKind)
FLAG_STATUSES = tuple(s.value for s in FlagStatus)
#: The largest flag id the ``flags.flag_id`` column can hold (a 64-bit row id since
#: session 13, 32 bits before; PostgreSQL refuses a larger value in a query instead of
#: matching nothing).
MAX_FLAG_ID = MAX_ROW_ID

_RESULT_COLUMNS = (
    results.c.round_id,
    results.c.node_key,
    results.c.released_ns,
    results.c.arrived_ns,
    results.c.rtt_s,
    results.c.session_id,
    results.c.commitment,
    results.c.signature,
    results.c.error,
    # the ack and job-written stamps, kept in extra (text: only whether they are there
    # matters, for analysis.timing.effectively_loaded)
    results.c.extra["acked_ns"].as_string().label("acked_ns"),
    results.c.extra["job_written_ns"].as_string().label("job_written_ns"),
)


def jsonable(value: object) -> object:
    """``value`` as strict JSON: bytes as hex, non-finite floats as None, tuples/sets as
    lists, mapping keys as text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return [jsonable(v) for v in items]
    return value


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _rounds_with_results_of(node_keys: Collection[str]) -> Select[tuple[str]]:
    """The ids of the rounds in which one of ``node_keys`` has a ``results`` row (it
    was sent work; index ``ix_results_node``)."""
    return select(results.c.round_id).where(results.c.node_key.in_(list(node_keys)))


class FlagStore:
    """Round schedules and flags in the database of ``store`` (tables created if missing).

    Raises:
        StorageError: the tables cannot be created.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        with store._write("create detection tables") as conn:
            metadata.create_all(conn, tables=[round_schedules, flags])

    # ----------------------------------------------------------- schedules

    def record_schedule(
        self,
        round_id: str,
        profile: str,
        kind: str,
        rule: str,
        schedule: Mapping[str, bool],
        context: Mapping[str, Any] | None = None,
        *,
        recorded_at: float | None = None,
    ) -> None:
        """Store a round's kind and full schedule; the round must exist (``record_plan``).

        Raises:
            ValueError: unknown ``kind``.
            StorageError: unknown round, schedule already stored, or database failure.
        """
        if kind not in ROUND_KINDS:
            raise ValueError(f"round kind must be one of {ROUND_KINDS}, got {kind!r}")
        with self.store._write(f"record schedule {round_id}") as conn:
            conn.execute(
                insert(round_schedules).values(
                    round_id=round_id,
                    profile=profile,
                    kind=kind,
                    rule=rule,
                    schedule={str(k): bool(v) for k, v in sorted(schedule.items())},
                    context=None if context is None else jsonable(context),
                    recorded_at=time.time() if recorded_at is None else recorded_at,
                )
            )

    def schedule(self, round_id: str) -> dict[str, Any] | None:
        """The ``round_schedules`` row of one round, or None."""
        query = select(round_schedules).where(round_schedules.c.round_id == round_id)
        with self.store._read("read schedule") as conn:
            row = conn.execute(query).first()
        return None if row is None else dict(row._mapping)

    def round_rules(self, round_ids: Collection[str]) -> dict[str, tuple[str, str]]:
        """``{round_id: (kind, rule)}`` of the given rounds that have a stored schedule
        (a round without one is left out), read by primary key in chunks of 500."""
        ids = sorted(set(round_ids))
        s = round_schedules.c
        out: dict[str, tuple[str, str]] = {}
        with self.store._read("read round rules") as conn:
            for i in range(0, len(ids), 500):
                query = select(s.round_id, s.kind, s.rule).where(s.round_id.in_(ids[i : i + 500]))
                out.update((r.round_id, (r.kind, r.rule)) for r in conn.execute(query))
        return out

    def recent_rounds(
        self, profile: str, kinds: Collection[str], limit: int, *, complete_only: bool = True,
        node_keys: Collection[str] | None = None, kind_rules: Collection[tuple[str, str]] = (),
    ) -> StoredRounds:  # fmt: skip
        """The ``limit`` most recent rounds of ``profile`` with a kind in ``kinds`` (or a
        ``(kind, rule)`` pair in ``kind_rules``, e.g. the confirmation rounds with
        screening coins), with their schedules and raw result rows (oldest first).
        Recency is the rounds' persistence order (``rounds.seq``), immune to wall-clock
        steps. With
        ``node_keys``: only rounds in which one of these nodes has a result row (it was
        sent work), so that other nodes' rounds do not crowd them out of ``limit``; and
        each schedule keeps only the bits of ``node_keys`` and of the loaded nodes (read
        row by row: 4,096 full schedules of 1,000 nodes held ~700 MB)."""
        s = round_schedules.c
        query = (
            select(s.round_id, s.kind, s.schedule, s.context)
            .select_from(round_schedules.join(rounds, rounds.c.round_id == s.round_id))
            .where(
                s.profile == profile,
                or_(
                    s.kind.in_(list(kinds)),
                    *(and_(s.kind == kind, s.rule == rule) for kind, rule in kind_rules),
                ),
            )
            .order_by(rounds.c.seq.desc())  # not started_at: wall-clock time steps back
            .limit(limit)
        )
        if node_keys is not None:
            query = query.where(s.round_id.in_(_rounds_with_results_of(node_keys)))
        if complete_only:
            # recorded-late: complete, its results waited in the spool (docs/spool.md)
            query = query.where(rounds.c.status.in_(["complete", "recorded-late"]))
        keep = None if node_keys is None else set(node_keys)
        picked: list[tuple[str, str, dict[str, bool], dict[str, Any]]] = []
        with self.store._read("read recent rounds") as conn:
            for r in conn.execute(query):
                bits = dict(r.schedule)
                if keep is not None:
                    bits = {k: on for k, on in bits.items() if on or k in keep}
                context = dict(r.context) if isinstance(r.context, Mapping) else {}
                picked.append((r.round_id, r.kind, bits, context))
        picked.reverse()
        ids = tuple(rid for rid, _, _, _ in picked)
        return StoredRounds(
            ids,
            {rid: kind for rid, kind, _, _ in picked},
            {rid: bits for rid, _, bits, _ in picked},
            tuple(self.round_results(ids)),
            {rid: ctx for rid, _, _, ctx in picked},
        )

    def count_rounds(self, profile: str, kinds: Collection[str]) -> int:
        """How many rounds of ``profile`` with a kind in ``kinds`` are stored (any status)."""
        s = round_schedules.c
        query = (
            select(func.count())
            .select_from(round_schedules)
            .where(s.profile == profile, s.kind.in_(list(kinds)))
        )
        with self.store._read("count rounds") as conn:
            return int(conn.execute(query).scalar_one())

    def round_results(self, round_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Raw ``results`` rows (timing and receipt columns) of the given rounds."""
        out: list[dict[str, Any]] = []
        with self.store._read("read round results") as conn:
            for i in range(0, len(round_ids), 500):
                chunk = list(round_ids[i : i + 500])
                query = select(*_RESULT_COLUMNS).where(results.c.round_id.in_(chunk))
                out.extend(dict(r._mapping) for r in conn.execute(query))
        return out

    def alone_results(self, profile: str, node_key: str) -> list[dict[str, Any]]:
        """The node's ``results`` rows (timing and receipt columns) of its *alone
        rounds*: the complete ``confirmation`` rounds of ``profile`` in which it has the
        only ``results`` row, oldest first (``rounds.seq``), whatever ran them (the alone
        stage, contention confirmation's member-alone rounds). Every node a round loads
        gets a row (a row of NULLs when it never answered), so that is the round whose
        schedule loads this node only. No limit: the alone stage indexes a node's alone
        rounds over its whole life (:func:`netcheck.analysis.alone.window`); read
        through ``ix_results_node`` and the (round, node) key, without the schedules."""
        r, other = results.c, results.alias("other").c
        query = (
            select(*_RESULT_COLUMNS)
            .select_from(
                results.join(rounds, rounds.c.round_id == r.round_id).join(
                    round_schedules, round_schedules.c.round_id == r.round_id
                )
            )
            .where(
                r.node_key == node_key,
                round_schedules.c.profile == profile,
                round_schedules.c.kind == str(RoundKind.CONFIRMATION),
                rounds.c.status.in_(["complete", "recorded-late"]),
                ~exists().where(other.round_id == r.round_id, other.node_key != node_key),
            )
            .order_by(rounds.c.seq)
        )
        with self.store._read("read alone rounds") as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def round_contexts(
        self, profile: str, kinds: Collection[str], *, node_keys: Collection[str] | None = None
    ) -> list[dict[str, Any]]:
        """The stored contexts of the rounds of ``profile`` with a kind in ``kinds``,
        oldest first (``rounds.seq``), whatever their status (a round cut short
        counts); ``{}`` where none was stored. With ``node_keys``: only rounds in which
        one of these nodes has a result row, as in :meth:`recent_rounds` (index
        ``ix_results_node``). No limit: only the context column is read, row by row
        (confirmation attempts are counted over a group's whole history)."""
        s = round_schedules.c
        query = (
            select(s.context)
            .select_from(round_schedules.join(rounds, rounds.c.round_id == s.round_id))
            .where(s.profile == profile, s.kind.in_(list(kinds)))
            .order_by(rounds.c.seq)
        )
        if node_keys is not None:
            query = query.where(s.round_id.in_(_rounds_with_results_of(node_keys)))
        with self.store._read("read round contexts") as conn:
            return [dict(r.context) if isinstance(r.context, Mapping) else {}
                    for r in conn.execute(query)]  # fmt: skip

    def recent_verdicts(
        self,
        node_key: str,
        limit: int,
        kinds: Collection[str] | None = None,
        *,
        up_to_round: str | None = None,
    ) -> list[dict[str, Any]]:
        """A node's ``limit`` most recent verdicts, newest first (verdict row id:
        recording order; ``round_id``, ``verdict``, ``reason``, ``elapsed_s``,
        ``recorded_at``); only verdicts in ``kinds`` when given. With ``up_to_round``:
        only the verdicts of rounds planned no later than that round (``rounds.seq`` at
        most its own; none when it is not stored), the window as it was when that round
        ended, also for checks run late (docs/spool.md); checked on time, that round is
        the newest and nothing is left out."""
        v = verdicts.c
        query = select(v.round_id, v.verdict, v.reason, v.elapsed_s, v.recorded_at).where(
            v.node_key == node_key
        )
        if kinds is not None:
            query = query.where(v.verdict.in_(sorted(kinds)))
        query = _up_to_round(query, up_to_round).order_by(v.id.desc()).limit(limit)
        with self.store._read("read recent verdicts") as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def count_verdicts(
        self, node_key: str, kinds: Collection[str], *, up_to_round: str | None = None
    ) -> int:
        """How many verdicts of ``node_key`` are in ``kinds`` (every round stored; with
        ``up_to_round``, every round planned no later than that one, as in
        :meth:`recent_verdicts`)."""
        v = verdicts.c
        query = (
            select(func.count())
            .select_from(verdicts)
            .where(v.node_key == node_key, v.verdict.in_(sorted(kinds)))
        )
        with self.store._read("count verdicts") as conn:
            return int(conn.execute(_up_to_round(query, up_to_round)).scalar_one())

    # --------------------------------------------------------------- flags

    def add_flag(
        self,
        kind: str,
        status: str,
        profile: str,
        node_keys: Collection[str],
        statistic: float | None,
        threshold: float | None,
        evidence: Mapping[str, Any],
        *,
        created_at: float | None = None,
    ) -> int:
        """Store a flag; returns its id. Evidence is stored as strict JSON (:func:`jsonable`).

        Raises:
            ValueError: unknown ``status`` or no node keys.
            StorageError: the database failed.
        """
        if status not in FLAG_STATUSES:
            raise ValueError(f"flag status must be one of {FLAG_STATUSES}, got {status!r}")
        if not node_keys:
            raise ValueError("a flag names at least one node")
        with self.store._write(f"add {kind} flag") as conn:
            res = conn.execute(
                insert(flags).values(
                    kind=kind,
                    status=status,
                    profile=profile,
                    node_keys=sorted(set(node_keys)),
                    created_at=time.time() if created_at is None else created_at,
                    statistic=_finite(statistic),
                    threshold=_finite(threshold),
                    evidence=jsonable(evidence),
                )
            )
            key = res.inserted_primary_key
            assert key is not None
            return int(key[0])

    def set_status(self, flag_id: int, status: str) -> bool:
        """Change a flag's status; False if there is no such flag."""
        if status not in FLAG_STATUSES:
            raise ValueError(f"flag status must be one of {FLAG_STATUSES}, got {status!r}")
        with self.store._write(f"update flag {flag_id}") as conn:
            n = conn.execute(
                update(flags).where(flags.c.flag_id == flag_id).values(status=status)
            ).rowcount
        return n == 1

    def list_flags(
        self,
        *,
        kind: str | None = None,
        status: str | None = None,
        node_key: str | None = None,
        profile: str | None = None,
        limit: int | None = 200,
    ) -> list[Flag]:
        """Flags, newest first, without their evidence (``evidence`` None); optional
        filters (``profile`` in SQL, before ``limit``); ``limit=None``: all of them (a
        count over a node's or a profile's whole history must not lose its oldest rows to
        newer flags of other profiles or nodes)."""
        cols = [c for c in flags.c if c.name != "evidence"]
        query = select(*cols).order_by(flags.c.flag_id.desc())
        if kind is not None:
            query = query.where(flags.c.kind == kind)
        if status is not None:
            query = query.where(flags.c.status == status)
        if profile is not None:
            query = query.where(flags.c.profile == profile)
        if node_key is None and limit is not None:
            query = query.limit(limit)
        with self.store._read("list flags") as conn:
            rows = [Flag.from_row(dict(r._mapping)) for r in conn.execute(query)]
        if node_key is not None:  # JSON membership is not portable SQL; filter here
            rows = [r for r in rows if node_key in r.node_keys][:limit]
        return rows

    def get_flag(self, flag_id: int) -> Flag | None:
        """One flag with its evidence, or None."""
        with self.store._read("read flag") as conn:
            row = conn.execute(select(flags).where(flags.c.flag_id == flag_id)).first()
        return None if row is None else Flag.from_row(dict(row._mapping))

    def node_flag_evidence(self, kind: str, node_key: str, limit: int = 50) -> list[dict[str, Any]]:
        """The evidence documents of the ``limit`` newest flags of ``kind`` that name
        ``node_key`` (newest first), in two queries whatever their number (ids first,
        filtered here since JSON membership is not portable SQL; then their evidence).

        Raises:
            StorageError: the database failed.
        """
        with self.store._read("read flag evidence") as conn:
            picked = [
                r.flag_id
                for r in conn.execute(
                    select(flags.c.flag_id, flags.c.node_keys)
                    .where(flags.c.kind == kind)
                    .order_by(flags.c.flag_id.desc())
                )
                if node_key in r.node_keys
            ][:limit]
            if not picked:
                return []
            query = select(flags.c.flag_id, flags.c.evidence).where(flags.c.flag_id.in_(picked))
            by_id = {r.flag_id: r.evidence for r in conn.execute(query)}
        return [by_id[i] for i in picked if i in by_id]


def _up_to_round(query: Select[Any], round_id: str | None) -> Select[Any]:
    """``query`` over ``verdicts`` limited to the rounds planned no later than
    ``round_id`` (``rounds.seq``, assigned by the database in the order plans are
    stored; ``started_at`` is wall-clock and can step back); unchanged for None."""
    if round_id is None:
        return query
    bound = select(rounds.c.seq).where(rounds.c.round_id == round_id).scalar_subquery()
    # per verdict row, a primary-key look-up of its round (the node's rows come through
    # ix_verdicts_node, newest first, and stop at the limit)
    return query.where(
        exists().where(rounds.c.round_id == verdicts.c.round_id, rounds.c.seq <= bound)
    )
