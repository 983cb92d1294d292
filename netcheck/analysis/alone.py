"""Slowness confirmed on rounds that load one node alone (pure: no I/O, no clock).

The persistent-slowness test (:mod:`netcheck.analysis.slowness`) reads screening rounds,
where an honest node's co-hosted neighbour is loaded in about half of them and slows it
by the benign coupling (up to 20%), so its floor must sit at 1.25 ``t_ref``. A padded
farm at ``beta = 0.3`` (1.3 ``t_ref``), or a noisy one, clears that floor only slowly.
Rounds that load *only* the node remove the coupling, and the floor can come down to
what one card of the class takes alone: its speed spread (a few %) and the profile's
reference error (docs/detection.md, "Persistent slowness", "Confirmation alone").

Stages (the coordinator and the simulator run the same functions):

1. **Nomination** (:func:`nominees`): after each screening-slowness test, first every
   node it rejected (since session 6 a rejection is not a flag: the screening floor's
   null is violated by an honest slow card coupled to a busy neighbour, measured in the
   benchmark's false-flag population; with ``SlownessConfig.direct_flags`` it is a flag
   and the node is not nominated), then every other node whose screening rounds are
   above *this* floor more often than not, by the same sign test at ``nominate_p``
   (0.05; screening only nominates, as for contention: an honest node whose co-hosted
   neighbour slows it in some rounds may be nominated, and is then judged alone).
2. **Alone rounds**: ``rounds`` (16) rounds, each loading only that node.
3. **Test** (:func:`alone_test`): the one-sided **sign test** of ``H0: P(ratio > floor)
   <= 1/2`` (``ratio = service_s / t_ref``; a loaded round without a result counts as
   above; ``floor`` 1.2) over the node's most recent ``pool_rounds`` alone rounds —
   this attempt's and every earlier round that loaded only this node, contention
   confirmation's member-alone rounds included (evidence accumulates). The
   ``attempt``-th test of a node runs at ``alpha * 6 / (pi^2 attempt^2)``
   (:func:`~netcheck.analysis.slowness.spent_level`), so over its whole life a node
   whose median alone time sits at the floor is flagged with probability at most
   ``alpha``.

What it does not see: anything that is fast alone (a plain farm, whose slowdown needs a
sibling loaded: contention; a backend faster than the class).
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from netcheck.analysis import rules
from netcheck.analysis.screening import timing_rows
from netcheck.analysis.slowness import (
    NodeSlowness,
    SlownessReport,
    node_record,
    sign_test_p,
    slowness_evidence,
    spent_level,
)
from netcheck.records import StoredRounds


@dataclass(frozen=True)
class AloneConfig:
    """Settings of the alone-round confirmation (module docstring): ``floor`` (1.2, a
    ratio to ``t_ref``), ``alpha`` (0.01, a node's lifetime level at the floor),
    ``nominate_p`` (0.05), ``rounds`` per attempt (16), ``min_rounds`` before a test
    (8), ``pool_rounds`` (256, most recent alone rounds judged).

    Raises:
        ValueError: ``floor <= 1``, ``alpha`` or ``nominate_p`` outside (0, 1), or a
            count below 1.
    """

    floor: float = 1.2
    alpha: float = 0.01
    nominate_p: float = 0.05
    rounds: int = 16
    min_rounds: int = 8
    pool_rounds: int = 256

    def __post_init__(self) -> None:
        if not self.floor > 1.0 or not 0.0 < self.alpha < 1.0 or not 0.0 < self.nominate_p < 1.0:
            raise ValueError("need floor > 1 and alpha, nominate_p in (0, 1)")
        if min(self.rounds, self.min_rounds, self.pool_rounds) < 1:
            raise ValueError("rounds, min_rounds and pool_rounds must be >= 1")


def nominees(report: SlownessReport, cfg: AloneConfig, skip: Collection[str] = ()) -> list[str]:
    """Nodes of a screening-slowness report to confirm alone, not in ``skip`` (already
    flagged slow): first those the report rejected (unless its rejections are flags,
    ``direct_flags``), then the others whose sign test of their screening ratios
    against ``cfg.floor`` is at most ``cfg.nominate_p``; none when the report's
    reference check failed (``t_ref`` does not describe the population)."""
    if not report.reference_ok:
        return []
    first, then = [], []
    for n in report.nodes:
        if n.node_key in skip or (n.flagged and report.direct_flags):
            continue
        if n.flagged:
            first.append(n.node_key)
        elif nomination_p(n, cfg) <= cfg.nominate_p:
            then.append(n.node_key)
    return first + then


def nomination_p(node: NodeSlowness, cfg: AloneConfig) -> float:
    """The sign test's p of ``node``'s screening ratios against the alone floor."""
    return sign_test_p(sum(1 for r in node.ratios if r is None or r > cfg.floor), node.n)


def nomination(
    node: NodeSlowness, report: SlownessReport, cfg: AloneConfig, rows: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Why the screening test sent ``node`` to the alone stage, for the evidence of
    its alone test: ``by`` in words, the screening test's full record (as a ``slow``
    flag of that test had it: :func:`~netcheck.analysis.slowness.slowness_evidence`,
    with ``rejected``) and the nomination test against the alone floor. ``rows``: the
    stored result rows of the screening window."""
    p = nomination_p(node, cfg)
    by = (
        f"the persistent-slowness test over screening rounds rejected at its level (p "
        f"{node.p_value:.3g} <= {node.level:.3g}, floor {report.floor:g})"
        if node.flagged
        else f"screening ratios above the alone floor {cfg.floor:g} more often than not "
        f"(sign test p {p:.3g} <= {cfg.nominate_p:g})"
    )
    return {
        "by": by,
        "rejected": node.flagged,
        "nominate_floor": cfg.floor,
        "nominate_p": cfg.nominate_p,
        "nomination_p_value": p,
        **slowness_evidence(node, report, rows),
    }


def alone_rounds(stored: StoredRounds, t_ref_s: float) -> dict[str, list[tuple[str, float | None]]]:
    """Per node, its rounds of ``stored`` that loaded it and no other node, oldest first,
    with ``service_s / t_ref_s`` (None: no result).

    Raises:
        ValueError: ``t_ref_s <= 0``.
    """
    if not t_ref_s > 0:
        raise ValueError("t_ref_s must be positive")
    single = {
        rid: next(k for k, on in sched.items() if on)
        for rid, sched in stored.schedules.items()
        if sum(1 for on in sched.values() if on) == 1
    }
    order = {r: i for i, r in enumerate(stored.round_ids)}
    out: dict[str, list[tuple[str, float | None]]] = {}
    for row in timing_rows(stored):
        if single.get(row.round_id) != row.node_key or not row.loaded:
            continue
        service = row.service_s()
        ratio = None if service is None else max(service, 0.0) / t_ref_s
        out.setdefault(row.node_key, []).append((row.round_id, ratio))
    for obs in out.values():
        obs.sort(key=lambda o: order.get(o[0], -1))
    return out


def alone_test(
    node_key: str, obs: Sequence[tuple[str, float | None]], attempt: int, cfg: AloneConfig
) -> NodeSlowness:
    """The sign test over the node's most recent ``cfg.pool_rounds`` alone rounds
    ``obs`` (round id, ratio; oldest first), as its ``attempt``-th test (module
    docstring), as a :class:`~netcheck.analysis.slowness.NodeSlowness` (the same record
    as the screening test's; ``level`` is this attempt's). Fewer than
    ``cfg.min_rounds`` rounds: not flagged.

    Raises:
        ValueError: ``attempt < 1``.
    """
    level = spent_level(cfg.alpha, attempt)
    recent = list(obs)[-cfg.pool_rounds :]
    ratios = tuple(r for _, r in recent)
    above = sum(1 for r in ratios if r is None or r > cfg.floor)
    p = sign_test_p(above, len(ratios))
    median = statistics.median(float("inf") if r is None else r for r in ratios) if ratios else 0.0
    flagged = len(ratios) >= cfg.min_rounds and p <= level
    return NodeSlowness(node_key, tuple(rid for rid, _ in recent), ratios, above, len(ratios),
                        median, p, level, flagged)  # fmt: skip


def alone_evidence(
    test: NodeSlowness,
    attempt: int,
    cfg: AloneConfig,
    t_ref_s: float,
    rows: Sequence[dict[str, Any]],
    screening: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Evidence of a ``slow`` flag (or its ``cleared`` record) from alone rounds: rule,
    settings, per round the ratio and raw latencies, counts, p-value and receipts;
    ``screening``: why the screening test nominated the node (:func:`nomination`),
    under ``"screening"`` when given (a cleared record keeps it without the screening
    rounds' latencies and receipts: an honest nominee may be judged at every analysis).
    ``rows``: stored result rows of ``test.round_ids``. To re-check: recompute
    ``service_s / t_ref_s`` from the latencies, count those above ``floor`` and take the
    binomial tail."""
    if screening is not None and not test.flagged:
        screening = {k: v for k, v in screening.items() if k not in ("latencies", "receipts")}
    extra = {} if screening is None else {"screening": screening}
    return {
        "rule": rules.slow_alone(cfg.floor, cfg.alpha),
        "test": "one-sided sign test over rounds loading only this node, "
        "H0: P(service_s / t_ref_s > floor) <= 1/2 per round",
        "stage": "alone",
        "t_ref_s": t_ref_s,
        "floor": cfg.floor,
        "alpha": cfg.alpha,
        "attempt": attempt,
        "level": test.level,
        **node_record(test, rows),
        **extra,
    }
