"""The per-round detection checks (docs/detection.md), run after every recorded round by
:meth:`netcheck.coordinator.detection.Screening.after_round`:

- :func:`result_sharing`: answer-level proof (:func:`find_result_sharing`) ->
  ``result-sharing`` flag at once;
- :func:`capacity`: the capacity test (:mod:`netcheck.analysis.lateness`: a binomial
  test of the node's ``late``/``missing`` rate against ``capacity_p0``, its level spent
  over the node's life) -> ``capacity`` flag;
- :func:`answer_failure`: ``answer_failure_strikes`` ``wrong-answer``/``malformed``
  verdicts among a node's last ``answer_failure_window`` checked rounds ->
  ``answer-failure`` flag (:mod:`netcheck.analysis.failures`);
- :func:`relay`: the relay test (:func:`~netcheck.analysis.screening.relay_check`) over
  the recent rounds of each node whose probe this round exceeded the floor or went
  unanswered -> ``relay`` flag, ``confirmed`` or ``pending``;
- :func:`slowness`: after every analysis, the persistent-slowness test's findings
  (:mod:`netcheck.analysis.slowness`) -> ``slow`` flag (only with ``direct_flags``;
  else its rejections go to the alone stage).

A finding is stored with :func:`~netcheck.storage.flag_merge.raise_flag`: a repeat of
an open flag (same kind and nodes, not resolved) adds its evidence to that flag instead
of raising another. A finding is not made twice for the same rounds: the evidence of a
node's earlier flags of that kind is read in two queries
(:meth:`FlagStore.node_flag_evidence`), not one per flag.
Each function runs in a worker thread (it reads and writes the database) and returns the
ids of the flags it raised or added evidence to.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from netcheck.analysis import evidence as ev
from netcheck.analysis.answers import NodeResult, find_result_sharing
from netcheck.analysis.confirm import RELAY
from netcheck.analysis.failures import (
    ANSWER_FAILURE,
    FAILURE_VERDICTS,
    answer_failure_check,
    answer_failure_evidence,
)
from netcheck.analysis.lateness import (
    STRIKES,
    TIMED,
    CapacityTestConfig,
    capacity_evidence,
    capacity_test,
    round_share,
)
from netcheck.analysis.schedule import rule_probability
from netcheck.analysis.screening import (
    CAPACITY,
    RELAY_MIN_ROUNDS,
    RELAY_WINDOW_ROUNDS,
    RESULT_SHARING,
    probe_pairs,
    relay_check,
    relay_suspect,
)
from netcheck.analysis.slowness import SLOW, SlownessReport, slowness_evidence
from netcheck.config import CoordinatorConfig, Profile
from netcheck.logs import node_label as who
from netcheck.records import (
    FlagStatus,
    NodeOutcome,
    NodeRecord,
    RoundKind,
    RoundPlan,
    StoredRounds,
)
from netcheck.storage.flag_merge import raise_flag
from netcheck.storage.flags import FlagStore

log = logging.getLogger("netcheck.screening")


def result_sharing(
    flags: FlagStore, profile: Profile, plan: RoundPlan, records: Mapping[str, NodeRecord]
) -> list[int]:
    """Answer-level proof (:func:`find_result_sharing`): a ``result-sharing`` flag, at
    once, for every pair of nodes whose answers match in this round, unless a flag of
    that pair already lists this round (its checks ran before: a spooled round's checks
    re-run after a crash, docs/spool.md); returns flag ids."""
    results = {
        key: NodeResult(rec.commitment, rec.outputs)
        for key, rec in records.items()
        if rec.outputs is not None
    }
    prompts = {a.node_key: a.prompts for a in plan.assignments}
    cut_at = profile.prompt_len if profile.workload == "llm" else None  # LLM engines cut left
    ids = []
    for f in find_result_sharing(plan.round_id, results, prompts, prompt_len=cut_at):
        if _pair_covered(flags, f.a, f.b, plan.round_id):
            continue  # this round's checks ran before (a replay after a crash)
        evidence = ev.result_sharing_evidence(plan.round_id, f, prompts, records)
        stat = float(len(f.positions) or 1)
        fid, new = raise_flag(flags, RESULT_SHARING, FlagStatus.CONFIRMED, profile.name,
                              [f.a, f.b], stat, 1.0, evidence)  # fmt: skip
        ids.append(fid)
        log.warning("round %s: result sharing between %s and %s (%s): %s",
                    plan.round_id, who(f.a), who(f.b), f.evidence, _raised(fid, new))  # fmt: skip
    return ids


def capacity_config(config: CoordinatorConfig) -> CapacityTestConfig:
    """The capacity test's settings from the coordinator's ``capacity_*`` fields and its
    screening round mix (``capacity_p0`` is stated at load probability 1/2 with every
    4th round full and scaled for ``screening_load_probability`` and
    ``screening_full_every``: :func:`~netcheck.analysis.lateness.null_p0`)."""
    return CapacityTestConfig(config.capacity_window, config.capacity_strikes,
                              config.capacity_p0, config.capacity_alpha,
                              config.screening_load_probability,
                              config.screening_full_every)  # fmt: skip


def stored_load_probabilities(flags: FlagStore, round_ids: Sequence[str]) -> dict[str, float]:
    """``{round_id: q}`` of the ``screening`` rounds among ``round_ids`` whose stored
    rule carries a load probability (:func:`~netcheck.analysis.schedule.rule_probability`:
    1/2 for the plain HMAC rule, ``q`` for ``;q=``); full and confirmation rounds, rounds
    without a stored schedule (a database from before round schedules) and unknown rules
    are left out (the capacity test, the slowness test and the alone nomination give
    them the configured ``q``)."""
    out = {}
    for rid, (kind, rule) in flags.round_rules(round_ids).items():
        q = rule_probability(rule) if kind == str(RoundKind.SCREENING) else None
        if q is not None:
            out[rid] = q
    return out


def stored_round_shares(flags: FlagStore, round_ids: Sequence[str]) -> dict[str, float]:
    """``{round_id: round share}`` of the rounds among ``round_ids`` with a stored
    schedule (:func:`~netcheck.analysis.lateness.round_share` of its kind and rule:
    ``q`` for a screening round whose rule carries it, 0 for an ``explicit``
    confirmation round with one ``results`` row (an alone round), 1 for full and other
    confirmation rounds); rounds without one (a database from before round schedules)
    are left out (the capacity test gives them the configured mix's expected share).
    The rows are read for the ``explicit`` confirmation rounds only (a group or one
    node: a few rows each); a confirmation round with screening coins loads other
    nodes by coin and counts 1 unread."""
    stored = flags.round_rules(round_ids)
    explicit = [rid for rid, (kind, rule) in stored.items()
                if kind == str(RoundKind.CONFIRMATION) and rule == "explicit"]  # fmt: skip
    sent = Counter(str(r["round_id"]) for r in flags.round_results(explicit)) if explicit else {}
    return {rid: round_share(kind, rule, sent.get(rid)) for rid, (kind, rule) in stored.items()}


def capacity(
    flags: FlagStore, config: CoordinatorConfig, profile: Profile, round_id: str,
    outcomes: Sequence[NodeOutcome],
) -> list[int]:  # fmt: skip
    """The capacity test (:func:`~netcheck.analysis.lateness.capacity_test`) for every
    node whose verdict in this round is ``late``/``missing``: a ``capacity`` flag
    (``confirmed``; statistic = p-value, threshold = the look's level) when it rejects,
    unless a capacity flag of the node already covers a strike of the window; returns
    flag ids. The null follows the window's own rounds (session 12): each round's share
    of coupled load from its stored kind and rule (:func:`stored_round_shares`), the
    test at their mean, whatever ``q`` and ``screening_full_every`` they ran at. The
    window and the strike count stop at ``round_id`` (rounds planned after it are left
    out: the same test on time or run late, docs/spool.md)."""
    cfg = capacity_config(config)
    ids = []
    for o in outcomes:
        if str(o.verdict) not in STRIKES:
            continue
        # the window as of this round, also when its checks run late (docs/spool.md)
        recent = flags.recent_verdicts(o.node_key, cfg.window, TIMED, up_to_round=round_id)
        look = flags.count_verdicts(o.node_key, STRIKES, up_to_round=round_id)
        shares = stored_round_shares(flags, [str(v["round_id"]) for v in recent])
        test = capacity_test(recent, look, cfg, shares)
        if not test.flagged or _capacity_flagged(flags, o.node_key, test.rounds):
            continue
        rows = [r for r in flags.round_results(test.rounds) if r["node_key"] == o.node_key]
        evidence = capacity_evidence(test, cfg, recent, profile.deadline.model_dump(), rows)
        fid, new = raise_flag(flags, CAPACITY, FlagStatus.CONFIRMED, profile.name, [o.node_key],
                              test.p_value, test.level, evidence)  # fmt: skip
        ids.append(fid)
        log.warning("node %s: capacity (%d late or missing in its last %d timed rounds, "
                    "p = %.2g <= %.2g at strike %d): %s", who(o.node_key), test.strikes,
                    test.n, test.p_value, test.level, test.look, _raised(fid, new))  # fmt: skip
    return ids


def answer_failure(
    flags: FlagStore, config: CoordinatorConfig, profile: Profile, round_id: str,
    outcomes: Sequence[NodeOutcome],
) -> list[int]:  # fmt: skip
    """Answer failures: an ``answer-failure`` flag for a node with
    ``answer_failure_strikes`` ``wrong-answer``/``malformed`` verdicts among its last
    ``answer_failure_window`` checked rounds up to ``round_id`` (rounds planned after it
    are left out, docs/spool.md) (once per window); returns flag ids."""
    window, need = config.answer_failure_window, config.answer_failure_strikes
    ids = []
    for o in outcomes:
        if str(o.verdict) not in FAILURE_VERDICTS:
            continue
        # unchecked rounds do not fill the window: read enough verdicts to skip them
        recent = flags.recent_verdicts(o.node_key, 4 * window, up_to_round=round_id)
        checked, hits, failed = answer_failure_check(recent, window, need)
        round_ids = [v["round_id"] for v in checked]
        if not failed or _covered(flags, ANSWER_FAILURE, "failure_rounds", o.node_key, round_ids):
            continue
        hit_ids = {v["round_id"] for v in hits}
        receipts = [ev.receipt(r) for r in flags.round_results(sorted(hit_ids))
                    if r["node_key"] == o.node_key and r.get("signature")]  # fmt: skip
        evidence = answer_failure_evidence(checked, hits, window, need, receipts)
        fid, new = raise_flag(flags, ANSWER_FAILURE, FlagStatus.CONFIRMED, profile.name,
                              [o.node_key], float(len(hits)), float(need), evidence)  # fmt: skip
        ids.append(fid)
        log.warning("node %s: answers failed in %d of its last %d checked rounds: %s",
                    who(o.node_key), len(hits), len(checked), _raised(fid, new))  # fmt: skip
    return ids


def _raised(flag_id: int, new: bool) -> str:
    return f"{'new flag' if new else 'added to open flag'} #{flag_id}"


def relay(
    flags: FlagStore, profile: Profile, round_id: str, records: Mapping[str, NodeRecord]
) -> list[int]:
    """The relay test over the stored probe and echo RTTs of the recent rounds up to
    ``round_id`` (rounds planned after it are left out, docs/spool.md) of every node
    whose probe in this round exceeded the floor or went unanswered (a persistent
    excess shows in most rounds; docs/detection.md "Relay test")."""
    store = flags.store
    suspects = [
        k
        for k, rec in records.items()
        if rec.timing is not None and relay_suspect(rec.timing, profile.probe_ref_s)
    ]
    by_round: dict[str, dict[str, dict[str, Any]]] = {}

    def row(round_id: str, node_key: str) -> dict[str, Any] | None:
        if round_id not in by_round:
            by_round[round_id] = {r["node_key"]: r for r in store.round_verdicts(round_id)}
        return by_round[round_id].get(node_key)

    ids = []
    for node in sorted(suspects):
        recent = flags.recent_verdicts(node, RELAY_WINDOW_ROUNDS, up_to_round=round_id)[::-1]
        rows = [r for v in recent if (r := row(v["round_id"], node)) is not None]
        pairs = probe_pairs(rows)
        res = relay_check(pairs, profile.probe_ref_s)
        flagged = res is not None and res.flagged
        silent = res is None and len(pairs.unanswered) >= RELAY_MIN_ROUNDS
        if not (flagged or silent):
            continue
        window = [v["round_id"] for v in recent]
        if _relay_flagged(flags, node, window):
            continue
        evidence = ev.relay_evidence(profile.probe_ref_s, rows, pairs, res)
        if flagged:
            assert res is not None
            fid, new = raise_flag(flags, RELAY, FlagStatus.CONFIRMED, profile.name, [node],
                                  res.median_excess_s, res.threshold_s, evidence)  # fmt: skip
            ids.append(fid)
            log.warning("node %s: relay (probe excess %.1f ms > %.1f ms): %s",
                        who(node), res.median_excess_s * 1e3, res.threshold_s * 1e3,
                        _raised(fid, new))  # fmt: skip
        else:
            fid, new = raise_flag(flags, RELAY, FlagStatus.PENDING, profile.name, [node],
                                  float(len(pairs.unanswered)), float(RELAY_MIN_ROUNDS),
                                  evidence)  # fmt: skip
            ids.append(fid)
            log.warning("node %s: relay (pending): probes unanswered in %d rounds: %s",
                        who(node), len(pairs.unanswered), _raised(fid, new))  # fmt: skip
    return ids


def slowness(
    flags: FlagStore, profile: Profile, stored: StoredRounds, report: SlownessReport
) -> list[int]:
    """A ``slow`` flag (``confirmed``) for every node the persistent-slowness test flags
    by itself (:attr:`SlownessReport.direct`: only with ``direct_flags``; by default its
    rejections are candidates of the alone stage, :mod:`netcheck.coordinator.alone`),
    unless a ``slow`` flag of that node already covers a round of its window; returns
    flag ids. A failed reference check is logged (``t_ref`` does not describe the
    population) and flags nothing."""
    if not report.reference_ok:
        log.warning("profile %s: persistent-slowness test skipped: the median node takes "
                    "%.2f x t_ref (%.3f s), above the floor %.2f (slowness_floor); is t_ref "
                    "right, or do the class's cards differ by more than the floor allows? "
                    "Recalibrate the profile on the class's cards (`netcheck engine "
                    "calibrate` on each, `netcheck engine pool ... --update-profile %s`), "
                    "or raise slowness_floor in the coordinator config",
                    profile.name, report.population_median_ratio, report.t_ref_s,
                    report.floor, profile.name)  # fmt: skip
        return []
    ids = []
    for node in report.direct:
        if _covered(flags, SLOW, "rounds", node.node_key, node.round_ids):
            continue
        evidence = slowness_evidence(node, report, stored.results)
        fid, new = raise_flag(flags, SLOW, FlagStatus.CONFIRMED, profile.name, [node.node_key],
                              node.p_value, node.level, evidence)  # fmt: skip
        ids.append(fid)
        log.warning("node %s: slow (%d of %d screening rounds above %.2f x t_ref, p = %.2g "
                    "<= %.2g): %s", who(node.node_key), node.above, node.n, report.floor,
                    node.p_value, node.level, _raised(fid, new))  # fmt: skip
    return ids


def _pair_covered(flags: FlagStore, a: str, b: str, round_id: str) -> bool:
    """A result-sharing flag of the pair ``a``, ``b`` (its evidence's ``prompts`` name
    both) already lists ``round_id``."""
    return any(
        round_id in evidence.get("rounds", []) and set(evidence.get("prompts", {})) == {a, b}
        for evidence in flags.node_flag_evidence(RESULT_SHARING, a, limit=50)
    )


def _relay_flagged(flags: FlagStore, node_key: str, window_rounds: Sequence[str]) -> bool:
    """A relay flag of this node already covers a round of the current window."""
    return _covered(flags, RELAY, "rounds", node_key, window_rounds)


def _capacity_flagged(flags: FlagStore, node_key: str, window_rounds: Sequence[str]) -> bool:
    """A capacity flag of this node already covers a round of the current window."""
    return _covered(flags, CAPACITY, "strike_rounds", node_key, window_rounds)


def _covered(
    flags: FlagStore, kind: str, field: str, node_key: str, window_rounds: Sequence[str]
) -> bool:
    """One of the 50 newest ``kind`` flags of ``node_key`` lists (in its evidence's
    ``field``) a round of ``window_rounds``."""
    window = set(window_rounds)
    return any(
        window & set(evidence.get(field, []))
        for evidence in flags.node_flag_evidence(kind, node_key, limit=50)
    )
