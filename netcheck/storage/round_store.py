"""A round's rows: its plan (spending its canaries), its verdicts and results, its end;
and reading them back. One transaction per call; ``records`` types become rows here."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from netcheck.errors import StorageError
from netcheck.records import NodeOutcome, NodeRecord, RoundPlan
from netcheck.storage.database import Database, hex_text, json_ready
from netcheck.storage.tables import assignments, reference_prompts, results, rounds, verdicts

_CHUNK = 500  # ids per IN (...) clause; far below every backend's parameter limit
#: Timing fields stored in their own ``results`` columns, not in ``extra``.
_COLUMN_TIMING = ("arrived_ns", "rtt_s")


class RoundStore(Database):
    """The round reads and writes of :class:`~netcheck.storage.store.Store`."""

    def record_plan(self, plan: RoundPlan, started_at: float) -> None:
        """Store a round (status ``planned``) and its assignments; mark its canaries spent.

        One transaction: a canary is spent exactly when its plan is stored, even if the
        round later aborts. ``job_key``/``job_nonce`` are stored (hex) for analysts.

        Raises:
            StorageError: a chosen canary is unknown or already spent, the round id
                exists, or the database failed. Nothing is stored then.
        """
        ids = [cid for a in plan.assignments for cid in a.canary_ids]
        if len(set(ids)) != len(ids):
            raise StorageError(f"record plan {plan.round_id}: a canary appears twice in the plan")
        with self._write(f"record plan {plan.round_id}") as conn:
            conn.execute(
                insert(rounds).values(
                    round_id=plan.round_id,
                    profile=plan.profile,
                    batch_size=plan.batch_size,
                    max_new_tokens=plan.max_new_tokens,
                    started_at=started_at,
                    status="planned",
                    skipped=[list(s) for s in plan.skipped],
                    **self._next_seq(conn),
                )
            )
            if plan.assignments:
                conn.execute(
                    insert(assignments),
                    [
                        {
                            "round_id": plan.round_id,
                            "node_key": a.node_key,
                            "prompts": list(a.prompts),
                            "canary_ids": list(a.canary_ids),
                            "positions": list(a.canary_positions),
                            "job_key": a.job_key.hex(),
                            "job_nonce": a.job_nonce.hex(),
                        }
                        for a in plan.assignments
                    ],
                )
            t = reference_prompts
            for i in range(0, len(ids), _CHUNK):
                chunk = ids[i : i + _CHUNK]
                spent = conn.execute(
                    update(t)
                    .where(t.c.ref_id.in_(chunk), t.c.spent_round.is_(None))
                    .values(spent_round=plan.round_id)
                ).rowcount
                if spent != len(chunk):
                    raise StorageError(
                        f"record plan {plan.round_id}: {len(chunk) - spent} chosen canaries "
                        "are unknown or already spent"
                    )

    @staticmethod
    def _next_seq(conn: Connection) -> dict[str, Any]:
        """``seq`` for a new round: PostgreSQL's identity column assigns it; elsewhere
        max + 1, safe because SQLite writers are serialised (``BEGIN IMMEDIATE``)."""
        if conn.dialect.name == "postgresql":
            return {}
        top = select(func.coalesce(func.max(rounds.c.seq), 0) + 1).scalar_subquery()
        return {"seq": top}

    def record_outcome(
        self,
        round_id: str,
        outcomes: Sequence[NodeOutcome],
        records: Mapping[str, NodeRecord],
        round_timing: Mapping[str, Any] | None = None,
    ) -> int:
        """Store results and verdicts of a round in one transaction; returns rows added.

        ``records`` maps a node key to its :class:`~netcheck.records.NodeRecord`; each
        outcome gets one ``results`` row: ``released_ns`` is the timing's
        ``release_start_ns``, ``arrived_ns`` and ``rtt_s`` its own columns, the other
        timing fields, the ``budget`` and the record's ``extra`` go to the ``extra`` JSON
        column; the receipt bytes are stored hex. An outcome without a record gets a row
        of NULLs. ``round_timing`` (JSON-able values) is merged into the round row's
        ``timing``.

        Idempotent per (round, node): outcomes for a node already recorded in this round
        are ignored (the first record wins), so a retried call stores nothing twice.

        Raises StorageError if the round is unknown or the database failed.
        """
        round_level = {str(k): json_ready(v) for k, v in (round_timing or {}).items()}
        now = time.time()
        with self._write(f"record outcome {round_id}") as conn:
            row = conn.execute(select(rounds.c.timing).where(rounds.c.round_id == round_id)).first()
            if row is None:
                raise StorageError(f"record outcome {round_id}: unknown round")
            if round_level:
                merged = {**(row[0] or {}), **round_level}
                conn.execute(
                    update(rounds).where(rounds.c.round_id == round_id).values(timing=merged)
                )
            done = set(
                conn.execute(
                    select(verdicts.c.node_key).where(verdicts.c.round_id == round_id)
                ).scalars()
            )
            fresh: dict[str, NodeOutcome] = {}
            for o in outcomes:
                if o.node_key not in done:
                    fresh.setdefault(o.node_key, o)
            if not fresh:
                return 0
            conn.execute(
                insert(verdicts),
                [
                    {
                        "round_id": round_id,
                        **o.to_json(),
                        "recorded_at": now,
                        "passed": str(o.verdict) == "pass",
                    }
                    for o in fresh.values()
                ],
            )
            conn.execute(
                insert(results),
                [self._result_values(round_id, k, records.get(k)) for k in fresh],
            )
        return len(fresh)

    @staticmethod
    def _result_values(round_id: str, node_key: str, rec: NodeRecord | None) -> dict[str, Any]:
        """The ``results`` row of one record (no record: a row of NULLs)."""
        rec = rec or NodeRecord()
        timing = rec.timing_dict()
        extra = {k: v for k, v in timing.items() if k not in _COLUMN_TIMING}
        if rec.budget is not None:
            extra["budget"] = rec.budget
        extra.update(rec.extra)
        return {
            "round_id": round_id,
            "node_key": node_key,
            "released_ns": timing.get("release_start_ns"),
            "arrived_ns": timing.get("arrived_ns"),
            "rtt_s": timing.get("rtt_s"),
            "error": rec.error,
            "session_id": hex_text(rec.session_id),
            "commitment": hex_text(rec.commitment),
            "signature": hex_text(rec.signature),
            "outputs": None if rec.outputs is None else [list(o) for o in rec.outputs],
            "extra": json_ready(extra) or None,
        }

    def finish_round(
        self,
        round_id: str,
        status: str,
        summary: Mapping[str, Any],
        *,
        finished_at: float | None = None,
        only_open: bool = False,
    ) -> bool:
        """Set a round's final ``status`` and ``summary``; ``finished_at`` defaults to now.

        With ``only_open`` only a round not yet finished (``finished_at`` is NULL) is
        changed (a spool replay, docs/spool.md); returns whether the row changed.

        Raises StorageError if the round is unknown.
        """
        with self._write(f"finish round {round_id}") as conn:
            where = [rounds.c.round_id == round_id]
            if only_open:
                where.append(rounds.c.finished_at.is_(None))
                if conn.execute(select(rounds.c.seq).where(*where[:1])).first() is None:
                    raise StorageError(f"finish round {round_id}: unknown round")
            n = conn.execute(
                update(rounds)
                .where(*where)
                .values(
                    status=status,
                    summary=json_ready(summary),
                    finished_at=time.time() if finished_at is None else finished_at,
                )
            ).rowcount
            if n != 1 and not only_open:
                raise StorageError(f"finish round {round_id}: unknown round")
            return n == 1

    def abort_unfinished_rounds(
        self, *, finished_at: float | None = None, keep: Sequence[str] = ()
    ) -> int:
        """Mark every round without ``finished_at`` as ``aborted`` (e.g. after a crash),
        except the rounds in ``keep`` (their results wait in the spool, docs/spool.md).

        Their canaries stay spent. Returns the number of rounds marked.
        """
        where = [rounds.c.finished_at.is_(None)]
        if keep:
            where.append(rounds.c.round_id.not_in(list(keep)))
        with self._write("abort unfinished rounds") as conn:
            return conn.execute(
                update(rounds)
                .where(*where)
                .values(
                    status="aborted",
                    finished_at=time.time() if finished_at is None else finished_at,
                )
            ).rowcount

    def list_rounds(self, limit: int = 50) -> list[dict[str, Any]]:
        """The ``limit`` most recently stored rounds, newest first (one dict per row).

        Ordered by ``seq`` (persistence order), not by the wall-clock ``started_at``."""
        query = select(rounds).order_by(rounds.c.seq.desc()).limit(limit)
        with self._read("list rounds") as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def round_assignments(self, round_id: str) -> list[dict[str, Any]]:
        """Assignment rows of one round (prompts, canary ids and positions, job key hex)."""
        query = (
            select(assignments)
            .where(assignments.c.round_id == round_id)
            .order_by(assignments.c.node_key)
        )
        with self._read("read assignments") as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def round_verdicts(self, round_id: str) -> list[dict[str, Any]]:
        """Verdict rows of one round joined with their result evidence, by node key.

        Each dict holds the verdict columns plus ``session_id``, ``released_ns``,
        ``arrived_ns``, ``rtt_s``, ``commitment``, ``signature``, ``error``, ``extra``.
        """
        r = results.c
        query = (
            select(
                verdicts,
                r.session_id,
                r.released_ns,
                r.arrived_ns,
                r.rtt_s,
                r.commitment,
                r.signature,
                r.error,
                r.extra,
            )
            .select_from(
                verdicts.outerjoin(
                    results,
                    (r.round_id == verdicts.c.round_id) & (r.node_key == verdicts.c.node_key),
                )
            )
            .where(verdicts.c.round_id == round_id)
            .order_by(verdicts.c.node_key)
        )
        with self._read("read verdicts") as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def round_shape(self, round_id: str) -> tuple[int, int] | None:
        """The declared shape of a round's results: ``(batch_size, max_new_tokens)`` of
        its ``rounds`` row (B rows of at most that many token ids), or None if there is no
        such round. Bounds what ``netcheck receipt verify`` reads (:mod:`netcheck.receipts`).

        Raises StorageError if the database failed.
        """
        query = select(rounds.c.batch_size, rounds.c.max_new_tokens).where(
            rounds.c.round_id == round_id
        )
        with self._read("read round shape") as conn:
            row = conn.execute(query).first()
        return None if row is None else (int(row[0]), int(row[1]))

    def result_row(self, round_id: str, node_key: str) -> dict[str, Any] | None:
        """The ``results`` row of one node in one round, or None if there is none.

        Keys are the column names: ``session_id``, ``commitment``, ``signature`` (hex
        str or None), ``outputs`` (list of token-id lists or None), timings, ``error``,
        ``extra``. ``node_key`` is the text form (``ed25519:...``). Used to check a
        stored receipt offline (:mod:`netcheck.receipts`).

        Raises StorageError if the database failed.
        """
        query = select(results).where(
            (results.c.round_id == round_id) & (results.c.node_key == node_key)
        )
        with self._read("read result") as conn:
            row = conn.execute(query).first()
        return None if row is None else dict(row._mapping)
