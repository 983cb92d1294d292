"""Reference prompts (canaries) and reference sets: adding them, drawing unspent ones
for a plan, counting the pool (docs/references.md)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import case, func, insert, select

from netcheck.storage.database import Database
from netcheck.storage.tables import ReferenceRow, reference_prompts, reference_sets


class ReferenceStore(Database):
    """The reference-pool reads and writes of :class:`~netcheck.storage.store.Store`."""

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
