"""Read-only queries for the dashboard and the exports (SQLAlchemy Core, no writes).

Every query reads the tables of :mod:`netcheck.storage.tables` through the engine of the
coordinator's :class:`~netcheck.storage.Store` (``Store`` owns the connection pool and
the SQLite pragmas; this module only issues ``SELECT``). SQLAlchemy errors become
:class:`~netcheck.errors.StorageError` as in the store.

Flags are read from the ``flags`` table of :mod:`netcheck.storage.flags` if the database
has one, as plain dicts; :mod:`netcheck.web.flagview` maps those to what the pages show.
Without the table (a database no coordinator has opened yet), there are simply no flags.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    Integer,
    Numeric,
    Table,
    and_,
    case,
    func,
    inspect,
    select,
)
from sqlalchemy.exc import SQLAlchemyError

from netcheck.errors import StorageError
from netcheck.records import Flag
from netcheck.storage.group_reader import GroupQueries
from netcheck.storage.store import Store
from netcheck.storage.tables import (
    flag_reviews,
    nodes,
    reference_prompts,
    results,
    rounds,
    verdicts,
)
from netcheck.storage.tables import flags as flags_table

#: Failing verdicts among a node's most recent ``STRIKE_WINDOW`` verdicts are its strikes.
STRIKE_WINDOW = 10
#: The verdict that is neither pass nor failure (analysis.verdicts.Verdict.UNCHECKED).
UNCHECKED = "unchecked"


def pass_rate(passed: int, checked: int) -> float | None:
    """Passed / checked verdicts; None when nothing was checked (``unchecked`` verdicts,
    given when the canary pool is empty, count neither way)."""
    return passed / checked if checked else None


#: Columns of each export, in order (cell types come from the tables: :meth:`Reader.column_types`).
EXPORT_COLUMNS: dict[str, tuple[str, ...]] = {
    "rounds": (
        "round_id", "profile", "batch_size", "max_new_tokens", "started_at", "finished_at",
        "status", "skipped", "timing", "summary",
    ),
    "verdicts": (
        "round_id", "node_key", "verdict", "reason", "elapsed_s", "canaries_checked",
        "canaries_matched", "recorded_at", "passed",
    ),
    "timings": (
        "round_id", "node_key", "session_id", "released_ns", "arrived_ns", "rtt_s",
        "commitment", "signature", "error", "extra",
    ),
}  # fmt: skip
_EXPORT_TABLES = {"rounds": rounds, "verdicts": verdicts, "timings": results}
#: Review columns after the ``flags`` columns in the flags export: the latest
#: ``flag_reviews`` row's state (``open`` when never reviewed), who, when (Unix seconds)
#: and note; all but ``review`` null for a flag never reviewed.
REVIEW_COLUMNS: dict[str, str] = {
    "review": "text", "reviewed_by": "text", "reviewed_at": "float", "review_note": "text",
}  # fmt: skip
#: The last column of the flags export: the flag's whole review history, a JSON list of
#: ``{"state", "by", "at", "note"}`` (``at`` in Unix seconds), oldest first (by row id);
#: ``[]`` for a flag never reviewed.
REVIEW_HISTORY_COLUMN = "reviews"


def _type_name(column: Any) -> str:
    """``int``, ``float``, ``bool``, ``json`` or ``text``: how an export cell decodes."""
    t = column.type
    if isinstance(t, JSON):
        return "json"
    if isinstance(t, Boolean):
        return "bool"
    if isinstance(t, Integer):  # BigInteger is an Integer
        return "int"
    if isinstance(t, Float | Numeric):
        return "float"
    return "text"


class Reader(GroupQueries):
    """Read-only views of one store's database (the group evidence queries come from
    :class:`~netcheck.storage.group_reader.GroupQueries`).

    Args:
        store: the coordinator's store; its engine (pool, pragmas) is reused.
    """

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._flags: Table | None = None
        self._reviews: Table | None = None

    # ------------------------------------------------------------------ nodes

    def node_summaries(self) -> list[dict[str, Any]]:
        """Every known node with its verdict statistics, most recently seen first.

        Keys: the ``nodes`` columns plus ``rounds`` (verdicts recorded), ``passed``,
        ``checked`` (verdicts other than ``unchecked``), ``pass_rate`` (passed / checked;
        None when nothing was checked), ``strikes`` (failing verdicts among the last
        :data:`STRIKE_WINDOW`; ``unchecked`` is not a failure), ``last_verdict`` and
        ``last_round``.
        """
        v = verdicts.c
        totals = (
            select(
                v.node_key,
                func.count().label("rounds"),
                func.sum(case((v.passed, 1), else_=0)).label("passed"),
                func.sum(case((v.verdict == UNCHECKED, 0), else_=1)).label("checked"),
            )
            .group_by(v.node_key)
            .subquery()
        )
        ranked = select(
            v.node_key,
            v.verdict,
            v.round_id,
            v.passed,
            func.row_number()
            .over(partition_by=v.node_key, order_by=v.id.desc())  # not wall-clock recorded_at
            .label("rn"),
        ).subquery()
        strikes = (
            select(
                ranked.c.node_key,
                func.sum(
                    case((ranked.c.passed, 0), (ranked.c.verdict == UNCHECKED, 0), else_=1)
                ).label("strikes"),
            )
            .where(ranked.c.rn <= STRIKE_WINDOW)
            .group_by(ranked.c.node_key)
            .subquery()
        )
        last = (
            select(ranked.c.node_key, ranked.c.verdict, ranked.c.round_id)
            .where(ranked.c.rn == 1)
            .subquery()
        )
        query = (
            select(
                nodes,
                func.coalesce(totals.c.rounds, 0).label("rounds"),
                func.coalesce(totals.c.passed, 0).label("passed"),
                func.coalesce(totals.c.checked, 0).label("checked"),
                func.coalesce(strikes.c.strikes, 0).label("strikes"),
                last.c.verdict.label("last_verdict"),
                last.c.round_id.label("last_round"),
            )
            .select_from(
                nodes.outerjoin(totals, totals.c.node_key == nodes.c.node_key)
                .outerjoin(strikes, strikes.c.node_key == nodes.c.node_key)
                .outerjoin(last, last.c.node_key == nodes.c.node_key)
            )
            .order_by(nodes.c.last_seen_at.desc(), nodes.c.name, nodes.c.node_key)
        )
        with self._conn("node summaries") as conn:
            out = [dict(r._mapping) for r in conn.execute(query)]
        for row in out:
            row["rounds"] = int(row["rounds"])
            row["passed"] = int(row["passed"])
            row["checked"] = int(row["checked"])
            row["strikes"] = int(row["strikes"])
            row["pass_rate"] = pass_rate(row["passed"], row["checked"])
        return out

    def node(self, node_key: str) -> dict[str, Any] | None:
        """The ``nodes`` row of one node, or None."""
        with self._conn("read node") as conn:
            row = conn.execute(select(nodes).where(nodes.c.node_key == node_key)).first()
        return None if row is None else dict(row._mapping)

    def node_history(self, node_key: str, limit: int = 200) -> list[dict[str, Any]]:
        """A node's last ``limit`` verdicts, oldest first, with timing evidence.

        Keys: verdict columns, the round's ``started_at`` and ``profile``, the result's
        ``released_ns``, ``arrived_ns``, ``rtt_s``, ``error`` and ``deadline_s`` (from the
        result's ``extra``; None if not recorded).
        """
        r = results.c
        query = (
            select(
                verdicts,
                rounds.c.started_at,
                rounds.c.profile,
                r.released_ns,
                r.arrived_ns,
                r.rtt_s,
                r.error,
                r.extra,
            )
            .select_from(
                verdicts.join(rounds, rounds.c.round_id == verdicts.c.round_id).outerjoin(
                    results,
                    and_(r.round_id == verdicts.c.round_id, r.node_key == verdicts.c.node_key),
                )
            )
            .where(verdicts.c.node_key == node_key)
            .order_by(rounds.c.seq.desc(), verdicts.c.id.desc())
            .limit(limit)
        )
        with self._conn("node history") as conn:
            out = [_with_deadline(dict(row._mapping)) for row in conn.execute(query)]
        out.reverse()
        return out

    # ----------------------------------------------------------------- rounds

    def rounds(self, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        """Rounds newest first (``seq``, not wall-clock ``started_at``), with ``counts``
        (verdict -> number) and ``nodes``."""
        query = select(rounds).order_by(rounds.c.seq.desc()).limit(limit).offset(offset)
        with self._conn("list rounds") as conn:
            out = [dict(r._mapping) for r in conn.execute(query)]
            ids = [r["round_id"] for r in out]
            counts: dict[str, dict[str, int]] = {rid: {} for rid in ids}
            if ids:
                v = verdicts.c
                cq = (
                    select(v.round_id, v.verdict, func.count())
                    .where(v.round_id.in_(ids))
                    .group_by(v.round_id, v.verdict)
                )
                for rid, verdict, n in conn.execute(cq):
                    counts[rid][verdict] = int(n)
        for row in out:
            row["counts"] = dict(sorted(counts[row["round_id"]].items()))
            row["nodes"] = sum(row["counts"].values())
        return out

    def count_rounds(self) -> int:
        """Number of rounds in the database."""
        with self._conn("count rounds") as conn:
            return int(conn.execute(select(func.count()).select_from(rounds)).scalar_one())

    def round(self, round_id: str) -> dict[str, Any] | None:
        """The ``rounds`` row of one round, or None."""
        with self._conn("read round") as conn:
            row = conn.execute(select(rounds).where(rounds.c.round_id == round_id)).first()
        return None if row is None else dict(row._mapping)

    def round_nodes(self, round_id: str) -> list[dict[str, Any]]:
        """Per-node rows of one round: verdict columns joined with the result's timing.

        Keys as :meth:`node_history` (without the round columns), plus ``name``.
        """
        r = results.c
        query = (
            select(
                verdicts,
                r.released_ns,
                r.arrived_ns,
                r.rtt_s,
                r.error,
                r.extra,
                r.session_id,
                r.commitment,
                r.signature,
                nodes.c.name,
            )
            .select_from(
                verdicts.outerjoin(
                    results,
                    and_(r.round_id == verdicts.c.round_id, r.node_key == verdicts.c.node_key),
                ).outerjoin(nodes, nodes.c.node_key == verdicts.c.node_key)
            )
            .where(verdicts.c.round_id == round_id)
            .order_by(verdicts.c.node_key)
        )
        with self._conn("round nodes") as conn:
            return [_with_deadline(dict(row._mapping)) for row in conn.execute(query)]

    # ------------------------------------------------------------------ integrity

    def integrity_counts(self) -> dict[str, int]:
        """Row counts for load runs (nothing lost, nothing twice): ``rounds``,
        ``results``, ``verdicts``, distinct (round, node) pairs of results and verdicts
        (``results_distinct``, ``verdicts_distinct``), ``canaries_spent`` and
        ``canaries_checked`` (the sum over verdicts).

        Raises:
            StorageError: the database failed.
        """
        with self._conn("integrity counts") as conn:

            def one(q: Any) -> int:
                return int(conn.execute(q).scalar_one())

            def distinct(t: Table) -> int:
                sub = select(t.c.round_id, t.c.node_key).distinct().subquery()
                return one(select(func.count()).select_from(sub))

            return {
                "rounds": one(select(func.count()).select_from(rounds)),
                "results": one(select(func.count()).select_from(results)),
                "results_distinct": distinct(results),
                "verdicts": one(select(func.count()).select_from(verdicts)),
                "verdicts_distinct": distinct(verdicts),
                "canaries_spent": one(
                    select(func.count())
                    .select_from(reference_prompts)
                    .where(reference_prompts.c.spent_round.is_not(None))
                ),
                "canaries_checked": one(
                    select(func.coalesce(func.sum(verdicts.c.canaries_checked), 0))
                ),
            }

    # ------------------------------------------------------------------ flags

    def _flags_table(self) -> Table | None:
        if self._flags is not None:
            return self._flags
        try:
            if not inspect(self._engine).has_table("flags"):
                return None
        except SQLAlchemyError as exc:
            raise StorageError(f"dashboard: read flags table: {exc}") from exc
        self._flags = flags_table
        return flags_table

    def flags(self) -> list[Flag]:
        """Every flag of the ``flags`` table with its evidence, newest first (by ``flag_id``, the order they
        were raised in; not by the wall-clock ``created_at``, which can step back)."""
        table = self._flags_table()
        if table is None:
            return []
        pk = list(table.primary_key.columns)
        query = select(table).order_by(*(c.desc() for c in pk))
        with self._conn("list flags") as conn:
            return [Flag.from_row(dict(r._mapping)) for r in conn.execute(query)]

    def _reviews_table(self) -> Table | None:
        if self._reviews is not None:
            return self._reviews
        try:
            if not inspect(self._engine).has_table("flag_reviews"):
                return None
        except SQLAlchemyError as exc:
            raise StorageError(f"dashboard: read flag_reviews table: {exc}") from exc
        self._reviews = flag_reviews
        return flag_reviews

    def flag_review_states(self) -> dict[int, dict[str, Any]]:
        """flag id -> the :data:`REVIEW_COLUMNS` of its latest ``flag_reviews`` row (by
        row id, not wall-clock ``at``); flags never reviewed (or no such table) are absent.

        Raises:
            StorageError: the database failed.
        """
        table = self._reviews_table()
        if table is None:
            return {}
        t = table.c
        latest = select(func.max(t.id)).group_by(t.flag_id).scalar_subquery()
        query = select(t.flag_id, t.state, t.by, t.at, t.note).where(t.id.in_(latest))
        with self._conn("read flag reviews") as conn:
            return {
                int(r.flag_id): {
                    "review": r.state,
                    "reviewed_by": r.by,
                    "reviewed_at": r.at,
                    "review_note": r.note,
                }
                for r in conn.execute(query)
            }

    def flag_review_histories(self) -> dict[int, list[dict[str, Any]]]:
        """flag id -> its ``flag_reviews`` rows as ``{"state", "by", "at", "note"}``, in
        the order they were made (row id, not wall-clock ``at``); flags never reviewed
        (or no such table) are absent.

        Raises:
            StorageError: the database failed.
        """
        table = self._reviews_table()
        if table is None:
            return {}
        t = table.c
        query = select(t.flag_id, t.state, t.by, t.at, t.note).order_by(t.id)
        out: dict[int, list[dict[str, Any]]] = {}
        with self._conn("read flag review history") as conn:
            for r in conn.execute(query):
                out.setdefault(int(r.flag_id), []).append(
                    {"state": r.state, "by": r.by, "at": r.at, "note": r.note}
                )
        return out

    def flag_columns(self) -> tuple[str, ...]:
        """Column names of the ``flags`` table (empty without one)."""
        table = self._flags_table()
        return () if table is None else tuple(c.name for c in table.columns)

    # ---------------------------------------------------------------- exports

    def column_types(self, kind: str) -> dict[str, str]:
        """How each column of an export decodes from CSV (see :func:`_type_name`)."""
        if kind == "flags":
            table = self._flags_table()
            if table is None:
                return {}
            history = {REVIEW_HISTORY_COLUMN: "json"}
            return {c.name: _type_name(c) for c in table.columns} | REVIEW_COLUMNS | history
        table = _EXPORT_TABLES[kind]
        return {c: _type_name(table.c[c]) for c in EXPORT_COLUMNS[kind]}

    def export_rows(
        self, kind: str, round_id: str | None = None
    ) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
        """Columns and rows of one export: ``rounds``, ``verdicts``, ``timings`` or ``flags``.

        Rows are in a fixed order (insertion order: ``rounds.seq``, the others' ``id``);
        ``round_id`` limits rounds, verdicts and timings to one round. Flags carry their
        latest review after the stored columns (:data:`REVIEW_COLUMNS`), then their whole
        review history (:data:`REVIEW_HISTORY_COLUMN`).

        Raises:
            KeyError: unknown ``kind``.
        """
        if kind == "flags":
            cols = self.flag_columns()
            if not cols:
                return (), []
            reviews = self.flag_review_states()
            histories = self.flag_review_histories()
            none = dict.fromkeys(REVIEW_COLUMNS) | {"review": "open"}
            rows = [
                f.as_dict()
                | reviews.get(int(f.flag_id), none)
                | {REVIEW_HISTORY_COLUMN: histories.get(int(f.flag_id), [])}
                for f in self.flags()
            ]
            return (*cols, *REVIEW_COLUMNS, REVIEW_HISTORY_COLUMN), rows
        cols = EXPORT_COLUMNS[kind]
        table = _EXPORT_TABLES[kind]
        order = rounds.c.seq if kind == "rounds" else table.c.id
        query = select(*(table.c[c] for c in cols)).order_by(order)
        if round_id is not None:
            query = query.where(table.c.round_id == round_id)
        with self._conn(f"export {kind}") as conn:
            return cols, [dict(r._mapping) for r in conn.execute(query)]


def _with_deadline(row: dict[str, Any]) -> dict[str, Any]:
    extra = row.get("extra") or {}
    deadline = extra.get("deadline_s") if isinstance(extra, dict) else None
    row["deadline_s"] = (
        float(deadline)
        if isinstance(deadline, int | float) and math.isfinite(float(deadline))
        else None
    )
    return row
