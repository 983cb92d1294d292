"""Read-only queries behind a flag's evidence page: names, who was loaded when with
which service time (the detectors' definitions, :mod:`netcheck.analysis.timing`), and the
stored receipts an analyst re-checks with ``netcheck receipt verify``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, func, select

from netcheck.analysis.timing import stored_timing_row
from netcheck.storage.read_base import ReaderBase
from netcheck.storage.tables import assignments, nodes, results, rounds, verdicts


class GroupQueries(ReaderBase):
    """The group-evidence half of :class:`~netcheck.storage.reader.Reader`."""

    def node_names(self, node_keys: Sequence[str]) -> dict[str, str]:
        """Stored display names of some nodes (only those with a non-empty name)."""
        query = select(nodes.c.node_key, nodes.c.name).where(nodes.c.node_key.in_(list(node_keys)))
        with self._conn("read node names") as conn:
            return {k: n for k, n in conn.execute(query) if n}

    def timing_matrix(
        self,
        node_keys: Sequence[str] | None,
        round_ids: Sequence[str] | None = None,
        limit: int = 400,
    ) -> dict[str, Any]:
        """Screening evidence of a group: who was loaded in which round, and service times.

        *Loaded* and ``service_s`` are the detectors' definitions
        (:func:`netcheck.analysis.timing.stored_timing_row`): sent work (an assignment)
        and its job written in full (or acknowledged, or released); ``(arrived -
        released) / 1e9 - rtt`` of a result (None without one; an error reply is no
        result).

        Args:
            node_keys: the group; None = every node loaded in one of ``round_ids``.
            round_ids: rounds to use; default: the ``limit`` most recent rounds in which
                any member was loaded.
        Returns:
            ``{"node_keys": [...], "round_ids": [...] (oldest first), "loaded": {key:
            [bool]}, "service_s": {key: [float | None]}, "elapsed_s": {key: [float |
            None]}}``.
        """
        a = assignments.c
        if node_keys is None:
            if round_ids is None:
                raise ValueError("give node_keys or round_ids")
            with self._conn("timing matrix nodes") as conn:
                kq = select(a.node_key).where(a.round_id.in_(list(round_ids))).distinct()
                keys = sorted(conn.execute(kq).scalars())
        else:
            keys = list(dict.fromkeys(node_keys))
        with self._conn("timing matrix") as conn:
            if round_ids is None:
                rq = (
                    select(a.round_id, func.min(rounds.c.seq).label("t"))
                    .select_from(assignments.join(rounds, rounds.c.round_id == a.round_id))
                    .where(a.node_key.in_(keys))
                    .group_by(a.round_id)
                    .order_by(func.min(rounds.c.seq).desc())
                    .limit(limit)
                )
                rids = [row[0] for row in conn.execute(rq)][::-1]
            else:
                rids = list(dict.fromkeys(round_ids))
            loaded = {k: [False] * len(rids) for k in keys}
            service: dict[str, list[float | None]] = {k: [None] * len(rids) for k in keys}
            elapsed: dict[str, list[float | None]] = {k: [None] * len(rids) for k in keys}
            index = {rid: i for i, rid in enumerate(rids)}
            if rids and keys:
                aq = select(a.round_id, a.node_key).where(
                    a.round_id.in_(rids), a.node_key.in_(keys)
                )
                assigned = {(rid, key) for rid, key in conn.execute(aq)}
                r = results.c
                tq = (
                    select(r.round_id, r.node_key, r.released_ns, r.arrived_ns, r.rtt_s,
                           r.commitment, verdicts.c.elapsed_s,
                           r.extra["acked_ns"].as_string().label("acked_ns"),
                           r.extra["job_written_ns"].as_string().label("job_written_ns"))
                    .select_from(
                        results.outerjoin(
                            verdicts,
                            and_(verdicts.c.round_id == r.round_id,
                                 verdicts.c.node_key == r.node_key),
                        )
                    )
                    .where(r.round_id.in_(rids), r.node_key.in_(keys))
                )  # fmt: skip
                for row in conn.execute(tq):
                    i = index[row.round_id]
                    elapsed[row.node_key][i] = row.elapsed_s
                    timing = stored_timing_row(
                        row.round_id, row.node_key, (row.round_id, row.node_key) in assigned,
                        dict(row._mapping),
                    )  # fmt: skip
                    loaded[row.node_key][i] = timing.loaded
                    service[row.node_key][i] = timing.service_s()
        return {
            "node_keys": keys,
            "round_ids": rids,
            "loaded": loaded,
            "service_s": service,
            "elapsed_s": elapsed,
        }

    def receipts(
        self, node_keys: Sequence[str], round_ids: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """Stored receipts of some nodes: what ``netcheck receipt verify`` needs, per result.

        Keys: ``round_id``, ``node_key``, ``session_id``, ``commitment``, ``signature``
        (hex), ``outputs`` (token ids), ``released_ns``, ``arrived_ns``, ``rtt_s``.
        """
        r = results.c
        query = (
            select(r.round_id, r.node_key, r.session_id, r.commitment, r.signature, r.outputs,
                   r.released_ns, r.arrived_ns, r.rtt_s)
            .where(r.node_key.in_(list(node_keys)), r.signature.is_not(None))
            .order_by(r.round_id, r.node_key)
        )  # fmt: skip
        if round_ids is not None:
            query = query.where(r.round_id.in_(list(round_ids)))
        with self._conn("read receipts") as conn:
            return [dict(row._mapping) for row in conn.execute(query)]
