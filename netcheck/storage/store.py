"""The :class:`Store`: every read and write of netcheck's database (SQLAlchemy Core 2.x).

SQLite by default (WAL journal, foreign keys on, ``busy_timeout``; write transactions
start with ``BEGIN IMMEDIATE`` so two writers queue instead of failing on lock upgrade);
PostgreSQL is a URL change. Every SQLAlchemy exception is mapped to
:class:`~netcheck.errors.StorageError` at this boundary.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, case, create_engine, event, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import (
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.pool import StaticPool

from netcheck.errors import StorageError, StorageUnavailable
from netcheck.records import NodeOutcome, NodeRecord, RoundPlan
from netcheck.storage import migrate
from netcheck.storage.tables import (
    ReferenceRow,
    assignments,
    metadata,
    nodes,
    reference_prompts,
    reference_sets,
    results,
    rounds,
    verdicts,
)

BUSY_TIMEOUT_MS = 5000
_CHUNK = 500  # ids per IN (...) clause; far below every backend's parameter limit
#: Timing fields stored in their own ``results`` columns, not in ``extra``.
_COLUMN_TIMING = ("arrived_ns", "rtt_s")


def _describe(exc: SQLAlchemyError) -> str:
    detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    low = detail.lower()
    if "locked" in low or "busy" in low or "lock timeout" in low:
        return f"database is locked ({detail})"
    if ("disk" in low and "full" in low) or "no space" in low:
        return f"disk full ({detail})"
    if isinstance(exc, IntegrityError):
        return f"integrity constraint violated ({detail})"
    return detail


def _transient(exc: SQLAlchemyError) -> bool:
    """True if the same write may succeed later: a lock held elsewhere, or the server
    unreachable or restarting (a lost connection). Constraint violations are not."""
    if isinstance(exc, IntegrityError):
        return False
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def _hex(value: object) -> object:
    return value.hex() if isinstance(value, bytes | bytearray) else value


def _jsonable(value: object) -> object:
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


class Store:
    """Database access for nodes, references, rounds, results and verdicts.

    Args:
        url: SQLAlchemy URL, e.g. ``sqlite:///path/netcheck.db`` (parent directory created),
            ``sqlite://`` (in memory) or ``postgresql+psycopg://...``. Tables are created
            if missing.
        busy_timeout_ms: how long a SQLite write waits for another writer's lock.

    Raises:
        StorageError: the database cannot be opened or initialised.
    """

    def __init__(self, url: str, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.url = url
        parsed = make_url(url)
        self.backend: str = parsed.get_backend_name()
        """``sqlite`` or ``postgresql`` (the SQLAlchemy backend name)."""
        self._sqlite = self.backend == "sqlite"
        kwargs: dict[str, Any] = {}
        if self._sqlite:
            database = parsed.database or ""
            kwargs["connect_args"] = {"check_same_thread": False}
            if database in ("", ":memory:"):
                kwargs["poolclass"] = StaticPool
            else:
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        elif parsed.get_backend_name() == "postgresql":
            # The PostgreSQL analogue of busy_timeout: a write waits this long for a row or
            # table lock held by another transaction, then fails as "database is locked".
            opts = f"-c lock_timeout={max(1, int(busy_timeout_ms))}"  # 0 would mean forever
            extra = parsed.query.get("options")
            kwargs["connect_args"] = {"options": f"{extra} {opts}" if extra else opts}
        try:
            self._engine: Engine = create_engine(url, **kwargs)
            if self._sqlite:
                self._setup_sqlite(self._engine, busy_timeout_ms)
            with self._errors("create tables"):
                metadata.create_all(self._engine)
            with self._read("check schema") as conn:
                stale = migrate.needs_upgrade(conn)
            if stale:
                with self._write("upgrade schema (add rounds.seq)") as conn:
                    migrate.upgrade(conn)
        except StorageError:
            raise
        except Exception as exc:  # bad URL, missing driver
            raise StorageError(f"cannot open database {url!r}: {exc}") from exc

    @staticmethod
    def _setup_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("netcheck_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except SQLAlchemyError as exc:
            kind = StorageUnavailable if _transient(exc) else StorageError
            raise kind(f"{action}: {_describe(exc)}") from exc

    @contextmanager
    def _write(self, action: str) -> Iterator[Connection]:
        """One write transaction; commits on success, rolls back on any exception."""
        with self._errors(action), self._engine.connect() as conn:
            conn = conn.execution_options(netcheck_write=True)
            with conn.begin():
                yield conn

    @contextmanager
    def _read(self, action: str) -> Iterator[Connection]:
        with self._errors(action), self._engine.connect() as conn, conn.begin():
            yield conn

    def close(self) -> None:
        """Release all pooled connections."""
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- nodes

    def upsert_node(
        self,
        node_key: str,
        name: str,
        profile: str,
        fingerprint_id: str,
        fingerprint: Mapping[str, str | int],
        seen_at: float,
    ) -> None:
        """Insert a node or update its name, profile, fingerprint and ``last_seen_at``."""
        values = {
            "name": name,
            "profile": profile,
            "fingerprint_id": fingerprint_id,
            "fingerprint": dict(fingerprint),
            "last_seen_at": seen_at,
        }
        with self._write("upsert node") as conn:
            if conn.dialect.name in ("sqlite", "postgresql"):  # one atomic statement
                dialect_insert = sqlite_insert if conn.dialect.name == "sqlite" else pg_insert
                stmt = dialect_insert(nodes).values(
                    node_key=node_key, first_seen_at=seen_at, **values
                )
                conn.execute(stmt.on_conflict_do_update(index_elements=["node_key"], set_=values))
                return
            found = conn.execute(
                update(nodes).where(nodes.c.node_key == node_key).values(**values)
            ).rowcount
            if not found:
                conn.execute(
                    insert(nodes).values(node_key=node_key, first_seen_at=seen_at, **values)
                )

    def touch_node(self, node_key: str, seen_at: float) -> None:
        """Set a known node's ``last_seen_at`` (when its session ends); unknown keys are
        ignored."""
        with self._write("update node last seen") as conn:
            conn.execute(
                update(nodes).where(nodes.c.node_key == node_key).values(last_seen_at=seen_at)
            )

    def list_nodes(self) -> list[dict[str, Any]]:
        """All nodes ever seen, most recently seen first (one dict per row)."""
        with self._read("list nodes") as conn:
            rows = conn.execute(select(nodes).order_by(nodes.c.last_seen_at.desc()))
            return [dict(r._mapping) for r in rows]

    # ----------------------------------------------------------- references

    def add_references(self, rows: Sequence[ReferenceRow]) -> int:
        """Store reference rows in one transaction; returns how many were added.

        Raises StorageError if a ``ref_id`` already exists (nothing is stored then).
        """
        if not rows:
            return 0
        values = [
            {
                "ref_id": r.ref_id,
                "profile": r.profile,
                "fingerprint_id": r.fingerprint_id,
                "prompt": r.prompt,
                "answer": list(r.answer),
                "created_at": r.created_at,
                "spent_round": r.spent_round,
            }
            for r in rows
        ]
        with self._write("add references") as conn:
            conn.execute(insert(reference_prompts), values)
        return len(values)

    @staticmethod
    def _reference(row: Any) -> ReferenceRow:
        m = row._mapping
        return ReferenceRow(
            ref_id=m["ref_id"],
            profile=m["profile"],
            fingerprint_id=m["fingerprint_id"],
            prompt=m["prompt"],
            answer=tuple(m["answer"]),
            created_at=m["created_at"],
            spent_round=m["spent_round"],
        )

    def unspent_canaries(
        self, fingerprint_id: str, limit: int, *, profile: str | None = None
    ) -> list[ReferenceRow]:
        """Up to ``limit`` unspent references for ``fingerprint_id`` (and ``profile``, if
        given), oldest first."""
        t = reference_prompts
        where = [t.c.fingerprint_id == fingerprint_id, t.c.spent_round.is_(None)]
        if profile is not None:
            where.append(t.c.profile == profile)
        query = select(t).where(*where).order_by(t.c.created_at, t.c.ref_id).limit(limit)
        with self._read("read canaries") as conn:
            return [self._reference(r) for r in conn.execute(query)]

    def count_references(
        self,
        fingerprint_id: str | None = None,
        *,
        unspent_only: bool = False,
        profile: str | None = None,
    ) -> int:
        """Number of stored references, optionally for one fingerprint, one profile name
        and/or unspent only."""
        t = reference_prompts
        query = select(func.count()).select_from(t)
        if fingerprint_id is not None:
            query = query.where(t.c.fingerprint_id == fingerprint_id)
        if profile is not None:
            query = query.where(t.c.profile == profile)
        if unspent_only:
            query = query.where(t.c.spent_round.is_(None))
        with self._read("count references") as conn:
            return int(conn.execute(query).scalar_one())

    def add_reference_set(
        self, profile: str, fingerprint_id: str, fingerprint: Mapping[str, str | int]
    ) -> None:
        """Remember the whole engine fingerprint of a reference set (kept if known), so
        a node whose fingerprint differs can be told which field differs."""
        values = {
            "fingerprint_id": fingerprint_id,
            "profile": profile,
            "fingerprint": dict(fingerprint),
            "created_at": time.time(),
        }
        with self._write("add reference set") as conn:
            found = conn.execute(
                select(reference_sets.c.fingerprint_id).where(
                    reference_sets.c.fingerprint_id == fingerprint_id
                )
            ).first()
            if found is None:
                conn.execute(insert(reference_sets).values(**values))

    def reference_fingerprints(self, profile: str) -> dict[str, dict[str, Any]]:
        """Fingerprint id -> whole fingerprint of the reference sets of ``profile``."""
        t = reference_sets
        with self._read("read reference sets") as conn:
            rows = conn.execute(
                select(t.c.fingerprint_id, t.c.fingerprint).where(t.c.profile == profile)
            )
            return {fp: dict(f) for fp, f in rows}

    def reference_pool(self) -> list[dict[str, Any]]:
        """Reference counts per (profile, fingerprint): one dict per pair with keys
        ``profile``, ``fingerprint_id``, ``total`` and ``unspent``, sorted by both names."""
        t = reference_prompts
        unspent = func.sum(case((t.c.spent_round.is_(None), 1), else_=0))
        query = (
            select(t.c.profile, t.c.fingerprint_id, func.count(), unspent)
            .group_by(t.c.profile, t.c.fingerprint_id)
            .order_by(t.c.profile, t.c.fingerprint_id)
        )
        with self._read("count the reference pool") as conn:
            return [
                {"profile": p, "fingerprint_id": fp, "total": int(n), "unspent": int(u or 0)}
                for p, fp, n, u in conn.execute(query)
            ]

    def canary_ids_used(self) -> list[str]:
        """ids of every spent reference, sorted."""
        t = reference_prompts
        query = select(t.c.ref_id).where(t.c.spent_round.is_not(None)).order_by(t.c.ref_id)
        with self._read("list spent canaries") as conn:
            return [r[0] for r in conn.execute(query)]

    # --------------------------------------------------------------- rounds

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
        round_level = {str(k): _jsonable(v) for k, v in (round_timing or {}).items()}
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
        timing = rec.timing.as_dict() if rec.timing is not None else {}
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
            "session_id": _hex(rec.session_id),
            "commitment": _hex(rec.commitment),
            "signature": _hex(rec.signature),
            "outputs": None if rec.outputs is None else [list(o) for o in rec.outputs],
            "extra": _jsonable(extra) or None,
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
                    summary=_jsonable(summary),
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
