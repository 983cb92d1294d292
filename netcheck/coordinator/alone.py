"""Slowness confirmed on rounds loading one node alone, in the running coordinator.

After each persistent-slowness test (:meth:`netcheck.coordinator.detection.Screening.analyse_and_confirm`),
every nominee (:func:`netcheck.analysis.alone.nominees`: the nodes the test rejected,
then the weaker nominees; a ``slow`` flag needs this stage) gets its next attempt: the
attempt ``k`` is its stored ``cleared`` ``slow`` records plus one, its alone rounds
are every stored round that loaded only this node, contention confirmation's
member-alone rounds too (:meth:`netcheck.storage.flags.FlagStore.alone_results`),
counted in order; confirmation rounds loading only it top them up to the ``k``-th
attempt's window (:func:`netcheck.analysis.alone.rounds_short`, usually
``AloneConfig.rounds``), and :func:`netcheck.analysis.alone.alone_test` judges that
window. The outcome is stored as a ``slow`` flag (``confirmed``) or a ``cleared``
``slow`` record (kept for audit; it also counts the attempts, so the level is spent
across them, docs/detection.md "Confirmation alone"); its evidence says which window
(``window``: first and last alone-round index, 1-based) and why the screening test
nominated the node (:func:`netcheck.analysis.alone.nomination`). A node that leaves
before its window is complete gets no test and no record (its next attempt is the same
one, on the same window). An attempt that is not flagged but promising
(:func:`netcheck.analysis.alone.extend`) is followed at once by the node's next attempt
(its own rounds, level and stored record), up to ``AloneConfig.max_attempts`` per
analysis, and so is one after which the next attempt's window is complete already
(catch-up, no round needed, up to ``AloneConfig.catch_up_attempts`` more); the
lifetime level argument is in :mod:`netcheck.analysis.alone` ("Level").

The stage stops "stopped, not judged", as the contention stages do
(:mod:`netcheck.coordinator.confirm_batches`), at a coordinator shutdown or a job's
cancel (the caller's ``halt``: :func:`~netcheck.coordinator.confirm_batches.halted`),
checked before each nominee, each attempt and each round and after each round: no
further round, no test, no record (the attempt is not spent: attempts are counted by
stored records); the alone rounds already run are stored and pooled into the node's
next attempt (its window counts every stored alone round). And when the canary pool
cannot cover a node's rounds (:func:`~netcheck.coordinator.pool.pool_shortfall`, checked
before them: not started) or the node comes back ``unchecked`` (no canary, so no job
and no timing: stopped at that round): a WARNING names the profile and the build
command (:data:`~netcheck.coordinator.confirm_batches.POOL_SHORT`); no test, no record,
the rounds with jobs pooled likewise. Before session 16 a cancel did not reach this
stage (it ran to its end and stored its records), and an empty pool still ran every
round of the window (``unchecked``: never judged, canaries of other nodes spent).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

from netcheck.analysis.alone import (
    AloneConfig,
    alone_evidence,
    alone_ratios,
    alone_test,
    extend,
    nomination,
    nominees,
    rounds_short,
    window,
)
from netcheck.analysis.slowness import SLOW, NodeSlowness, SlownessReport
from netcheck.config import Profile
from netcheck.coordinator.confirm_batches import pool_reason
from netcheck.coordinator.hooks import RoundHost
from netcheck.coordinator.jobs import ConfirmProgress
from netcheck.coordinator.pool import pool_shortfall
from netcheck.coordinator.rounds import run_round
from netcheck.errors import RoundError
from netcheck.logs import node_label as who
from netcheck.records import FlagStatus, RoundKind, Verdict
from netcheck.storage.flag_merge import raise_flag
from netcheck.storage.flags import FlagStore

log = logging.getLogger("netcheck.screening")


def slow_nodes(flags: FlagStore, profile: str) -> set[str]:
    """Nodes of ``profile`` with a confirmed ``slow`` flag (not nominated again)."""
    confirmed = flags.list_flags(
        kind=SLOW, status=FlagStatus.CONFIRMED, profile=profile, limit=None
    )
    return {k for f in confirmed for k in f.node_keys}


def next_attempt(flags: FlagStore, profile: str, key: str) -> int:
    """The number of ``key``'s next alone attempt: its stored ``cleared`` ``slow``
    records plus one (each judged attempt stores one; a confirmed flag ends them)."""
    earlier = flags.list_flags(kind=SLOW, status=FlagStatus.CLEARED, node_key=key,
                               profile=profile, limit=None)  # fmt: skip
    return len(earlier) + 1


def alone_short(flags: FlagStore, profile: Profile, key: str, cfg: AloneConfig) -> int:
    """How many more alone rounds ``key`` needs before its next attempt can run."""
    have = len(alone_ratios(flags.alone_results(profile.name, key), profile.reference_t_s))
    return rounds_short(have, next_attempt(flags, profile.name, key), cfg)


def record_alone_test(
    flags: FlagStore, profile: Profile, key: str, cfg: AloneConfig,
    screening: dict[str, Any] | None = None, in_analysis: int = 1,
) -> tuple[int, NodeSlowness, int] | None:  # fmt: skip
    """Judge ``key``'s stored alone rounds as its next attempt, on that attempt's window,
    and store the outcome (``screening``: why it was nominated, in the evidence;
    ``in_analysis``: the attempt's index among this analysis's attempts of the node);
    returns the flag (or cleared record) id, the test and how many rounds the attempt
    after it lacks (:func:`~netcheck.analysis.alone.rounds_short`), or None (nothing
    stored) when the window is not complete."""
    t_ref = profile.reference_t_s
    attempt = next_attempt(flags, profile.name, key)
    obs = alone_ratios(flags.alone_results(profile.name, key), t_ref)
    if rounds_short(len(obs), attempt, cfg):
        return None
    test = alone_test(key, obs, attempt, cfg)
    rows = flags.round_results(list(test.round_ids))
    evidence = alone_evidence(test, attempt, cfg, t_ref, rows, screening, in_analysis)
    status = FlagStatus.CONFIRMED if test.flagged else FlagStatus.CLEARED
    fid, _new = raise_flag(flags, SLOW, status, profile.name, [key], test.p_value, test.level,
                           evidence)  # fmt: skip
    span = window(attempt, cfg)
    log.warning("node %s: alone attempt %d, rounds %d-%d: %d of %d above %.2f x t_ref, p = %.2g "
                "(level %.2g): %s (flag %d)", who(key), attempt, span.start + 1, span.stop,
                test.above, test.n, cfg.floor, test.p_value, test.level,
                "slow" if test.flagged else "cleared", fid)  # fmt: skip
    return fid, test, rounds_short(len(obs), attempt + 1, cfg)


async def confirm_alone(
    coord: RoundHost, flags: FlagStore, profile: Profile, report: SlownessReport,
    cfg: AloneConfig, skip: Collection[str] = (), rows: Sequence[dict[str, Any]] = (),
    progress: ConfirmProgress | None = None, halt: Callable[[], str] | None = None,
    pool_short: list[dict[str, Any]] | None = None,
) -> list[int]:  # fmt: skip
    """Alone rounds and the test for every nominee of ``report`` not in ``skip``;
    returns the ids stored. Each attempt first tops the node's alone rounds up to its
    window (:func:`alone_short`); a nominee that is not connected (it left) gets no
    round, and one that leaves before its window is complete no test (an empty or
    short test would still spend one of its attempts), hence no flag, even one the
    screening test rejected. A promising attempt, or one after which the next
    attempt's window is complete already (catch-up), is followed at once by the next
    (:func:`netcheck.analysis.alone.extend`), while the node stays. ``rows``: the
    stored result rows of the report's window (the screening rounds' latencies and
    receipts in the evidence); ``progress`` (a job's) counts the rounds; ``halt``:
    why the stage must stop now unjudged ("" to go on; module docstring), e.g.
    :func:`~netcheck.coordinator.confirm_batches.halted` of the screening and the job's
    cancel. A short canary pool stops a node's attempt unjudged too (module docstring);
    each such node is appended to ``pool_short`` as ``{"node", "reason",
    "unchecked_rounds"}`` (the analysis report's ``alone_pool_short``).

    Raises:
        StorageError: a round or a record could not be stored.
    """
    ids: list[int] = []
    tested = {n.node_key: n for n in report.nodes}
    progress = progress or ConfirmProgress()
    halt = halt or (lambda: "")
    for key in nominees(report, cfg, skip):
        if _halted(halt, profile, key):
            break
        progress.stage = "alone"
        why = nomination(tested[key], report, cfg, rows)
        for in_analysis in range(1, cfg.max_attempts + cfg.catch_up_attempts + 1):
            short = await asyncio.to_thread(alone_short, flags, profile, key, cfg)
            if short:
                loaded, dry = await _alone_rounds(coord, profile, key, short, progress, halt)
                if dry and pool_short is not None:
                    pool_short.append({"node": key, "reason": dry,
                                       "unchecked_rounds": int(_STOPPED in dry)})  # fmt: skip
                if not loaded or dry:
                    break
            if _halted(halt, profile, key):  # the rounds run are pooled into the next attempt
                break
            done = await asyncio.to_thread(record_alone_test, flags, profile, key, cfg, why,
                                           in_analysis)  # fmt: skip
            if done is None:  # it left (or its rounds failed) before the window was complete
                break
            fid, test, next_short = done
            ids.append(fid)
            if not extend(test, in_analysis, cfg, next_short):
                break
    return ids


def _halted(halt: Callable[[], str], profile: Profile, key: str) -> bool:
    """Whether ``halt()`` names a cause; logs it (the node's attempt not judged)."""
    if cause := halt():
        log.warning("profile %s: alone stage at node %s: %s; stopped, not judged: no record, "
                    "its alone rounds count toward its next attempt", profile.name, who(key),
                    cause)  # fmt: skip
    return bool(cause)


async def _alone_rounds(
    coord: RoundHost, profile: Profile, key: str, rounds: int, progress: ConfirmProgress,
    halt: Callable[[], str],
) -> tuple[int, str]:  # fmt: skip
    """Up to ``rounds`` confirmation rounds loading only ``key``, while it is
    connected, ``halt()`` is "" and it gets a job (each counted in ``progress``);
    returns how many gave it a job (0: none run, logged) and, when the canary pool cut
    them short, why (a :data:`~netcheck.coordinator.confirm_batches.POOL_SHORT` reason
    naming the build command, logged; else ""): none is run when the pool cannot cover
    them, and a round in which it came back ``unchecked`` (no canary) is the last."""
    fps = {s.node_key: s.fingerprint_id for s in coord.connected(profile.name)}
    short = await asyncio.to_thread(pool_shortfall, coord.store, profile, {key: rounds}, fps)
    if short:
        dry = pool_reason(profile.name, f"{rounds} alone rounds; " + "; ".join(short),
                          _NOT_STARTED)  # fmt: skip
        log.warning("profile %s: alone rounds of %s: %s", profile.name, who(key), dry)
        return 0, dry
    loaded, dry = 0, ""
    try:
        for i in range(rounds):
            if key not in {s.node_key for s in coord.connected(profile.name)} or halt():
                break
            done = await run_round(coord, profile.name, load={key}, kind=RoundKind.CONFIRMATION,
                                   rule="explicit", context={"slowness": key, "round": i})  # fmt: skip
            progress.rounds_done += 1
            if any(o.node_key == key and o.verdict == Verdict.UNCHECKED for o in done.outcomes):
                dry = pool_reason(profile.name, f"round {done.round_id}: unchecked, no canary",
                                  _STOPPED)  # fmt: skip
                log.warning("profile %s: alone rounds of %s: %s", profile.name, who(key), dry)
                break
            loaded += bool(done.schedule.get(key))
    except RoundError as exc:
        log.warning("alone rounds of %s not run: %s", who(key), exc)
        return 0, ""
    if not loaded and not halt() and not dry:
        log.warning("alone rounds of %s not run: not connected", who(key))
    return loaded, dry


#: What a short canary pool did to a node's alone rounds (:data:`POOL_SHORT` reasons).
_NOT_STARTED = "not started: no round, no test, no record, no attempt spent"
_STOPPED = ("stopped, not judged: no test, no record; its alone rounds with jobs count toward "
            "its next attempt")  # fmt: skip
