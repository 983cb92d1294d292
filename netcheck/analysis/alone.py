"""Slowness confirmed on rounds that load one node alone (pure: no I/O, no clock).

The persistent-slowness test (:mod:`netcheck.analysis.slowness`) reads screening rounds,
where an honest node's co-hosted neighbour is loaded in about half of them and slows it
by the benign coupling (up to 20%), so its floor must sit at 1.25 ``t_ref`` (by default:
the coordinator's ``slowness_floor``; nothing here assumes its value). A padded
farm at ``beta = 0.3`` (1.3 ``t_ref``), or a noisy one, clears that floor only slowly.
Rounds that load *only* the node remove the coupling, and the floor can come down to
what one card of the class takes alone: its speed spread (a few %) and the profile's
reference error (docs/detection.md, "Persistent slowness", "Confirmation alone").

Stages (the coordinator and the simulator run the same functions):

1. **Nomination** (:func:`nominees`): after each screening-slowness test, first every
   node it rejected (since session 6 a rejection is not a flag: the screening floor's
   null is violated by an honest slow card coupled to a busy neighbour, measured in the
   benchmark's false-flag population; with ``SlownessConfig.direct_flags`` it is a flag
   and the node is not nominated), then every other node whose screening ratios sit
   above *this* floor by the nomination test (:func:`nomination_p`) at ``nominate_p``
   (0.05; screening only nominates, as for contention: an honest node whose co-hosted
   neighbour slows it in some rounds may be nominated, and is then judged alone). The
   nomination test (``nominate_test``) is by default the one-sided **Wilcoxon
   signed-rank test** of ``log(ratio / floor)`` (a round without a result: the largest
   difference): it uses how far each round is above or below the floor, not only its
   side. A padded pair on a card a few % fast with noise sigma 0.15 sits at 1.35-1.45
   ``t_ref``, and the sign test needed about 10 of its ~12 screening rounds above 1.2
   to nominate it (session 7). ``"sign"`` keeps the sign test (before session 7).
   Nomination spends no level: only the alone test flags. At a screening load
   probability ``q`` above 1/2 (session 9) a co-hosted neighbour is loaded in more of a
   node's screening rounds: the sign test's null rate becomes ``max(1/2, q)``
   (:func:`~netcheck.analysis.slowness.null_rate`) and the signed-rank test's floor
   ``floor * (1 + coupling) ** (q - 1/2)`` (:func:`nominate_floor`), so that honest
   co-hosted nodes are nominated about as often as at 1/2. A node whose screening
   rounds ran at several ``q`` (the setting changed while they were in the window;
   session 11) is nominated at the largest null rate and floor over them
   (:func:`window_nominate_floor`), the end that nominates fewer honest nodes
   (:func:`window_nominate_floor` says why that is the safe end of a stage that
   spends no level).
2. **Alone rounds**: rounds loading only that node, as many as the window of its next
   attempt still lacks (:func:`rounds_short`): ``rounds`` (16) when its earlier
   attempts used all its alone rounds, fewer when contention confirmation loaded it
   alone meanwhile, more when it left in the middle of an attempt.
3. **Test** (:func:`alone_test`): the one-sided **sign test** of ``H0: P(ratio > floor)
   <= 1/2`` (``ratio = service_s / t_ref``; a loaded round without a result counts as
   above; ``floor`` 1.2) over a **fixed window** of the node's alone rounds. Those are
   indexed in time order over the node's life, ``X_1, X_2, ...``: every round that
   loaded it and no other node (:func:`alone_ratios`), whatever ran it (this stage,
   contention confirmation's member-alone rounds: evidence accumulates), each once.
   The ``k``-th attempt judges ``X_i`` for ``max(0, k * rounds - pool_rounds) < i <=
   k * rounds`` (:func:`window`: the first ``16 k`` rounds, the latest 256 of them
   once ``16 k > 256``), at ``alpha * 6 / (pi^2 k^2)``
   (:func:`~netcheck.analysis.slowness.spent_level`), and runs only once the node has
   ``k * rounds`` alone rounds; a node that leaves before has no ``k``-th test, and
   its next attempt is the ``k``-th again. Rounds after ``X_{k rounds}`` wait for
   attempt ``k + 1``.
4. **Sequential attempts** (:func:`extend`, session 7): an attempt that is not flagged
   but promising (``p <= extend_p``, 0.1) is followed at once, in the same analysis, by
   the node's *next* attempt (its rounds topped up, its own level, its own stored
   ``cleared`` record in the coordinator), up to ``max_attempts`` (3) attempts per
   nominee and analysis. **Catch-up** (session 8): an attempt not flagged is also
   followed at once by the next, whatever its ``p``, when the next one's window is
   complete already (contention rounds left more than ``rounds`` alone rounds after
   this window: it needs no round), up to ``catch_up_attempts`` (16) more per
   analysis; otherwise a node with many member-alone rounds would be judged on windows
   far behind its newest rounds (the benchmark's ``selective+jitter`` cell, 2 seeds
   by 128 rounds: after a nominee's attempts of an analysis, its last window ended 16
   or more alone rounds before its newest in 115 of 651 cases, 8 of 639 with
   catch-up). The levels are the same ones in the same order, reached sooner.

**Level.** Under ``H0`` each alone round is above the floor with probability at most
1/2 given everything before it, whatever decided to run it. The window of attempt ``k``
is a fixed set of indices, so the number of its rounds above the floor is at most
``Binomial(|window|, 1/2)`` in distribution (the rounds a node never gets do not
matter: the attempt does not run), and ``P(attempt k runs and flags) <= level_k``.
By the union bound a node whose median alone time sits at the floor is flagged with
probability at most ``sum_k level_k = alpha`` over its life, whatever decides when
an attempt runs or which rounds come between: ``extend_p``, the analysis timer,
contention confirmation's member-alone rounds, a node leaving midway, ``pool_rounds``.
The attempt ``k`` is the node's stored ``cleared`` records plus one (a confirmed flag
ends its attempts), and the index is recounted from the stored rounds at every
attempt, so both survive a restart; a test whose record was lost in a crash is run
again on the same window, with the same outcome. (Records written before session 8
judged the most recent rounds instead: their attempts keep their numbers, their level
is not covered by this argument.) ``tests/analysis/test_alone.py`` checks the rate by
simulation, and that re-testing the most recent rounds breaks it.

Alternatives considered: (a) the pool of the most recent ``pool_rounds`` alone rounds
(sessions 4-7): attempt ``k``'s pool is a fixed index set only when every alone round
comes from this stage, ``rounds`` per attempt, none lost; otherwise data-dependent
timing (a promising attempt's follow-up, contention's rounds) makes it a test at a
chosen time. (b) Counting this stage's rounds only: valid, but throws contention's
member-alone rounds away, and a departure midway still needs the fixed index. (c)
Skipping to the attempt whose window ends at the newest round when a node has surplus
rounds: also valid (a skipped attempt spends nothing) but forfeits the skipped levels;
running the attempts in order (catch-up) costs no rounds either and loses none.

What it does not see: anything that is fast alone (a plain farm, whose slowdown needs a
sibling loaded: contention; a backend faster than the class).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats

from netcheck.analysis import rules
from netcheck.analysis.slowness import (
    NodeSlowness,
    SlownessReport,
    node_record,
    sign_test_p,
    slowness_evidence,
    spent_level,
    window_null_rate,
)
from netcheck.analysis.timing import stored_timing_row


@dataclass(frozen=True)
class AloneConfig:
    """Settings of the alone-round confirmation (module docstring): ``floor`` (1.2, a
    ratio to ``t_ref``), ``alpha`` (0.01, a node's lifetime level at the floor),
    ``nominate_p`` (0.05) and ``nominate_test`` (``"signed-rank"``, or ``"sign"``:
    before session 7) of the nomination, ``rounds`` per attempt (16), ``min_rounds``
    before a test (8), ``pool_rounds`` (256, the most alone rounds one attempt
    judges: :func:`window`), ``extend_p`` (0.1: an attempt not flagged with ``p <=
    extend_p`` is followed at once by the next), ``max_attempts`` per nominee and
    analysis (3; 1: one attempt per analysis, before session 7) and
    ``catch_up_attempts`` (16: further attempts per nominee and analysis whose windows
    are complete already, so that they need no round; 0: none, before session 8);
    ``coupling`` (0.2: the benign co-hosting slowdown the screening floor allows for,
    a fraction; it moves the signed-rank nomination's floor at load probabilities above
    1/2, :func:`nominate_floor`).

    Raises:
        ValueError: ``floor <= 1``, ``alpha`` or ``nominate_p`` outside (0, 1),
            ``extend_p`` outside [0, 1], an unknown ``nominate_test``, a count below 1,
            ``catch_up_attempts`` or ``coupling`` below 0.
    """

    floor: float = 1.2
    alpha: float = 0.01
    nominate_p: float = 0.05
    rounds: int = 16
    min_rounds: int = 8
    pool_rounds: int = 256
    nominate_test: Literal["signed-rank", "sign"] = "signed-rank"
    extend_p: float = 0.1
    coupling: float = 0.2
    max_attempts: int = 3
    catch_up_attempts: int = 16

    def __post_init__(self) -> None:
        if not self.floor > 1.0 or not 0.0 < self.alpha < 1.0 or not 0.0 < self.nominate_p < 1.0:
            raise ValueError("need floor > 1 and alpha, nominate_p in (0, 1)")
        if not 0.0 <= self.extend_p <= 1.0 or self.nominate_test not in ("signed-rank", "sign"):
            raise ValueError("need extend_p in [0, 1] and nominate_test signed-rank or sign")
        if min(self.rounds, self.min_rounds, self.pool_rounds, self.max_attempts) < 1:
            raise ValueError("rounds, min_rounds, pool_rounds and max_attempts must be >= 1")
        if self.catch_up_attempts < 0 or self.coupling < 0:
            raise ValueError("catch_up_attempts and coupling must be >= 0")


def nominees(report: SlownessReport, cfg: AloneConfig, skip: Collection[str] = ()) -> list[str]:
    """Nodes of a screening-slowness report to confirm alone, not in ``skip`` (already
    flagged slow): first those the report rejected (unless its rejections are flags,
    ``direct_flags``), then the others whose nomination test of their screening ratios
    against ``cfg.floor`` (:func:`nomination_p`, at the load probabilities of the node's
    rounds, :meth:`~netcheck.analysis.slowness.NodeSlowness.load_probabilities`, else
    the report's) is at most ``cfg.nominate_p``; none when the report's reference check failed (``t_ref``
    does not describe the population)."""
    if not report.reference_ok:
        return []
    first, then = [], []
    for n in report.nodes:
        if n.node_key in skip or (n.flagged and report.direct_flags):
            continue
        if n.flagged:
            first.append(n.node_key)
        elif nomination_p(n, cfg, n.load_probabilities(report.load_probability)) <= cfg.nominate_p:
            then.append(n.node_key)
    return first + then


def nominate_floor(cfg: AloneConfig, load_probability: float = 0.5) -> float:
    """The floor the signed-rank nomination compares screening ratios with at screening
    load probability ``q``: ``cfg.floor * (1 + cfg.coupling) ** max(0, q - 1/2)``
    (1.2 at ``q <= 1/2``, 1.237 at 2/3). Why: a co-hosted neighbour slows a node by
    ``1 + coupling`` in the share ``q`` of its screening rounds that load the neighbour
    too, so the mean of its ``log(ratio)`` is ``q log(1 + coupling)`` above its own;
    the nomination was set at the reference mix (``q = 1/2``), and the floor moves by
    the difference so that an honest coupled node sits as far from it at any ``q`` (the
    nomination spends no level: this keeps what it costs, alone rounds for honest
    nodes, as it was; measured in docs/detection-history.md, "Session 9"). Not lowered
    below 1/2: fewer coupled rounds only lower the ratios. The sign test's exact
    counterpart is :func:`~netcheck.analysis.slowness.null_rate`.

    Raises:
        ValueError: ``load_probability`` outside (0, 1).
    """
    if not 0.0 < load_probability < 1.0:
        raise ValueError("load_probability must be in (0, 1)")
    return cfg.floor * (1.0 + cfg.coupling) ** max(0.0, load_probability - 0.5)


def window_nominate_floor(cfg: AloneConfig, load_probabilities: Iterable[float]) -> float:
    """The signed-rank nomination's floor for screening rounds run at several load
    probabilities (``screening_load_probability`` changed while they were in the
    window): the LARGEST :func:`nominate_floor` over them (the floor at the largest
    ``q``: it is non-decreasing in ``q``).

    Which end is safe: nomination spends no level, and the alone test holds its level
    whatever nominated the node (module docstring, "Level"), so neither end adds false
    flags. What the floor sets is the trade between what nomination costs (alone
    rounds run for honest nodes, each a round of the profile's time) and recall (a slow farm
    nominated sooner). The floor at each ``q`` is set so that an honest coupled node is
    nominated as often as at the reference mix; a smaller floor than its rounds' mix
    warrants nominates honest coupled nodes more often than designed (after 2/3 -> 1/2,
    rounds run at 2/3 compared with 1.2 instead of 1.237), a larger one costs recall
    only for farms within a few % of the floor, and only while the old rounds are in
    the window. As for the sign test's null rate
    (:func:`~netcheck.analysis.slowness.window_null_rate`, where the larger end is the
    one that holds the level) and as :func:`nominate_floor` already does below
    ``q = 1/2`` (kept at ``cfg.floor``, not lowered), the larger floor is taken: the
    cost stays at or below its design, never above.

    Raises:
        ValueError: no load probability, or one outside (0, 1).
    """
    floors = [nominate_floor(cfg, q) for q in load_probabilities]
    if not floors:
        raise ValueError("need at least one load probability")
    return max(floors)


def nomination_p(
    node: NodeSlowness, cfg: AloneConfig, load_probability: float | Iterable[float] = 0.5
) -> float:
    """The nomination test's p of ``node``'s screening ratios against the alone floor
    (``cfg.nominate_test``) at screening load probability ``load_probability`` (``q``;
    several: the load probabilities the node's rounds ran at, each taken at the
    conservative end over them): ``"sign"``, the sign test of the rounds above
    ``cfg.floor`` at the null rate ``max(1/2, q)``
    (:func:`~netcheck.analysis.slowness.window_null_rate`: the largest); ``"signed-rank"``,
    the one-sided Wilcoxon signed-rank test (``H1``: above) of ``log(ratio / f)``,
    ``f`` = :func:`window_nominate_floor` (``cfg.floor`` at ``q <= 1/2``; the largest),
    a round without a result counting as the largest difference (rounds exactly at the
    floor dropped; 1.0 when none is left)."""
    qs = [load_probability] if isinstance(load_probability, int | float) else list(load_probability)
    if cfg.nominate_test == "sign":
        above = sum(1 for r in node.ratios if r is None or r > cfg.floor)
        return sign_test_p(above, node.n, window_null_rate(qs))
    floor = window_nominate_floor(cfg, qs)
    logs = [math.log(max(r, 1e-9) / floor) for r in node.ratios if r is not None]
    top = max((abs(d) for d in logs), default=0.0) + 1.0
    diffs = np.array(logs + [top] * sum(1 for r in node.ratios if r is None))
    if not np.any(diffs != 0.0):
        return 1.0
    return float(stats.wilcoxon(diffs, alternative="greater").pvalue)


NOMINATION_TESTS = {
    "sign": "sign test of the rounds above the alone floor",
    "signed-rank": "one-sided Wilcoxon signed-rank test of log(ratio / alone floor), a round "
    "without a result the largest difference",
}


def nomination(
    node: NodeSlowness, report: SlownessReport, cfg: AloneConfig, rows: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Why the screening test sent ``node`` to the alone stage, for the evidence of
    its alone test: ``by`` in words, the screening test's full record (as a ``slow``
    flag of that test had it: :func:`~netcheck.analysis.slowness.slowness_evidence`,
    with ``rejected``) and the nomination test against the alone floor (which test:
    ``nominate_test``; its p: ``nomination_p_value``). ``rows``: the
    stored result rows of the screening window. The nomination ran at the node's rounds'
    load probabilities (the largest; the screening record's ``mixes`` when they were
    several)."""
    qs = node.load_probabilities(report.load_probability)
    q = max(qs)
    p = nomination_p(node, cfg, qs)
    moved = cfg.nominate_test == "signed-rank" and q > 0.5
    at_q = (f", moved to {window_nominate_floor(cfg, qs):.4g} for load probability {q:.3g}"
            if moved else "")  # fmt: skip
    by = (
        f"the persistent-slowness test over screening rounds rejected at its level (p "
        f"{node.p_value:.3g} <= {node.level:.3g}, floor {report.floor:g})"
        if node.flagged
        else f"screening ratios above the alone floor {cfg.floor:g}{at_q} "
        f"({NOMINATION_TESTS[cfg.nominate_test]}: p {p:.3g} <= {cfg.nominate_p:g})"
    )
    return {
        "by": by,
        "rejected": node.flagged,
        "nominate_floor": cfg.floor,
        "nominate_p": cfg.nominate_p,
        "nominate_test": cfg.nominate_test,
        "nomination_p_value": p,
        **(
            {"nominate_floor_at_q": window_nominate_floor(cfg, qs), "coupling": cfg.coupling}
            if moved
            else {}
        ),
        **slowness_evidence(node, report, rows),
    }


def alone_ratios(rows: Sequence[dict[str, Any]], t_ref_s: float) -> list[tuple[str, float | None]]:
    """A node's alone rounds (round id, ``service_s / t_ref_s``; None: no result) from
    its stored ``results`` rows of the rounds that loaded it alone, oldest first
    (:meth:`netcheck.storage.flags.FlagStore.alone_results`): those in which it was
    loaded (its job acknowledged, :func:`~netcheck.analysis.timing.stored_timing_row`).
    The list's positions are the indices of :func:`window`.

    Raises:
        ValueError: ``t_ref_s <= 0``.
    """
    if not t_ref_s > 0:
        raise ValueError("t_ref_s must be positive")
    out: list[tuple[str, float | None]] = []
    for r in rows:
        row = stored_timing_row(r["round_id"], r["node_key"], True, r)
        if row.loaded:
            service = row.service_s()
            out.append((row.round_id, None if service is None else max(service, 0.0) / t_ref_s))
    return out


def window(attempt: int, cfg: AloneConfig) -> range:
    """The indices (0-based, time order, :func:`alone_ratios`) of the node's alone
    rounds that its ``attempt``-th test judges: ``range(max(0, attempt * rounds -
    pool_rounds), attempt * rounds)``, fixed by ``attempt`` alone (module docstring,
    "Level").

    Raises:
        ValueError: ``attempt < 1``.
    """
    if attempt < 1:
        raise ValueError("attempt must be >= 1")
    end = attempt * cfg.rounds
    return range(max(0, end - cfg.pool_rounds), end)


def rounds_short(have: int, attempt: int, cfg: AloneConfig) -> int:
    """How many more alone rounds a node with ``have`` of them needs before its
    ``attempt``-th test can run (0: its :func:`window` is complete).

    Raises:
        ValueError: ``attempt < 1``.
    """
    return max(0, window(attempt, cfg).stop - have)


def alone_test(
    node_key: str, obs: Sequence[tuple[str, float | None]], attempt: int, cfg: AloneConfig
) -> NodeSlowness:
    """The sign test of the node's ``attempt``-th test over its alone rounds in
    :func:`window` of ``obs`` (round id, ratio: every alone round of the node, oldest
    first, :func:`alone_ratios`), at the attempt's level (module docstring), as a
    :class:`~netcheck.analysis.slowness.NodeSlowness` (the same record as the screening
    test's). Fewer than ``cfg.min_rounds`` rounds in the window: not flagged.

    Raises:
        ValueError: ``attempt < 1``, or the window is not complete (``len(obs) <
            attempt * rounds``: run :func:`rounds_short` more alone rounds first).
    """
    level = spent_level(cfg.alpha, attempt)
    span = window(attempt, cfg)
    if len(obs) < span.stop:
        raise ValueError(f"attempt {attempt} judges alone rounds {span.start + 1}-{span.stop}; "
                         f"the node has {len(obs)}")  # fmt: skip
    judged = list(obs)[span.start : span.stop]
    ratios = tuple(r for _, r in judged)
    above = sum(1 for r in ratios if r is None or r > cfg.floor)
    p = sign_test_p(above, len(ratios))
    median = statistics.median(float("inf") if r is None else r for r in ratios) if ratios else 0.0
    flagged = len(ratios) >= cfg.min_rounds and p <= level
    return NodeSlowness(node_key, tuple(rid for rid, _ in judged), ratios, above, len(ratios),
                        median, p, level, flagged)  # fmt: skip


def extend(
    test: NodeSlowness, in_analysis: int, cfg: AloneConfig, next_short: int | None = None
) -> bool:
    """Whether a nominee's attempt ``test``, its ``in_analysis``-th of this analysis
    (1-based), is followed at once by its next attempt (module docstring, "Sequential
    attempts"): not flagged, and either ``p <= cfg.extend_p`` with fewer than
    ``cfg.max_attempts`` attempts this analysis, or (catch-up) the next attempt's
    window is complete already (``next_short``, its :func:`rounds_short`, is 0: it
    needs no round), whatever ``p``, with fewer than ``cfg.max_attempts +
    cfg.catch_up_attempts`` (``next_short`` None or ``catch_up_attempts`` 0: no
    catch-up)."""
    if test.flagged:
        return False
    if test.p_value <= cfg.extend_p and in_analysis < cfg.max_attempts:
        return True
    catch_up = cfg.catch_up_attempts > 0 and next_short == 0
    return catch_up and in_analysis < cfg.max_attempts + cfg.catch_up_attempts


def alone_evidence(
    test: NodeSlowness,
    attempt: int,
    cfg: AloneConfig,
    t_ref_s: float,
    rows: Sequence[dict[str, Any]],
    screening: dict[str, Any] | None = None,
    in_analysis: int = 1,
) -> dict[str, Any]:
    """Evidence of a ``slow`` flag (or its ``cleared`` record) from alone rounds: rule,
    settings, per round the ratio and raw latencies, counts, p-value and receipts;
    ``in_analysis``: the attempt's index among this analysis's attempts of the node
    (above 1: it followed a promising one at once, :func:`extend`);
    ``screening``: why the screening test nominated the node (:func:`nomination`),
    under ``"screening"`` when given (a cleared record keeps it without the screening
    rounds' latencies and receipts: an honest nominee may be judged at every analysis).
    ``window``: the 1-based indices of the first and last alone round judged (module
    docstring). ``rows``: stored result rows of ``test.round_ids``. To re-check:
    recompute ``service_s / t_ref_s`` from the latencies, count those above ``floor``
    and take the binomial tail."""
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
        "window": [window(attempt, cfg).start + 1, window(attempt, cfg).stop],
        "attempt_in_analysis": in_analysis,
        "extend_p": cfg.extend_p,
        "level": test.level,
        **node_record(test, rows),
        **extra,
    }
