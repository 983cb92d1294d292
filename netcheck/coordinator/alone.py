"""Slowness confirmed on rounds loading one node alone, in the running coordinator.

After each persistent-slowness test (:meth:`netcheck.coordinator.detection.Screening.analyse_and_confirm`),
every nominee (:func:`netcheck.analysis.alone.nominees`: the nodes the test rejected,
then the weaker nominees; a ``slow`` flag needs this stage) gets ``AloneConfig.rounds``
confirmation rounds that load only it; then :func:`netcheck.analysis.alone.alone_test`
judges every stored round that loaded only this node (the most recent
``AloneConfig.pool_rounds``; contention confirmation's member-alone rounds count too)
as the node's next attempt. The outcome is stored as a ``slow`` flag (``confirmed``) or
a ``cleared`` ``slow`` record (kept for audit; it also counts the attempts, so the
level is spent across them, docs/detection.md "Confirmation alone"); its evidence says
why the screening test nominated the node (:func:`netcheck.analysis.alone.nomination`).
An attempt that is not flagged but promising (:func:`netcheck.analysis.alone.extend`)
is followed at once by ``rounds`` more alone rounds and the node's next attempt (its own
level and its own stored record), up to ``AloneConfig.max_attempts`` per analysis; the
lifetime level argument is in :mod:`netcheck.analysis.alone` ("Sequential attempts").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from typing import Any

from netcheck.analysis.alone import (
    AloneConfig,
    alone_evidence,
    alone_rounds,
    alone_test,
    extend,
    nomination,
    nominees,
)
from netcheck.analysis.slowness import SLOW, NodeSlowness, SlownessReport
from netcheck.config import Profile
from netcheck.coordinator.hooks import RoundHost
from netcheck.coordinator.jobs import ConfirmProgress
from netcheck.coordinator.rounds import run_round
from netcheck.errors import RoundError
from netcheck.logs import node_label as who
from netcheck.records import FlagStatus, RoundKind
from netcheck.storage.flag_merge import raise_flag
from netcheck.storage.flags import FlagStore

log = logging.getLogger("netcheck.screening")


def slow_nodes(flags: FlagStore, profile: str) -> set[str]:
    """Nodes of ``profile`` with a confirmed ``slow`` flag (not nominated again)."""
    confirmed = flags.list_flags(
        kind=SLOW, status=FlagStatus.CONFIRMED, profile=profile, limit=None
    )
    return {k for f in confirmed for k in f.node_keys}


def record_alone_test(
    flags: FlagStore, profile: Profile, key: str, cfg: AloneConfig,
    screening: dict[str, Any] | None = None, in_analysis: int = 1,
) -> tuple[int, NodeSlowness]:  # fmt: skip
    """Judge ``key``'s stored alone rounds as its next attempt and store the outcome
    (``screening``: why it was nominated, in the evidence; ``in_analysis``: the
    attempt's index among this analysis's attempts of the node); returns the flag (or
    cleared record) id and the test."""
    earlier = flags.list_flags(kind=SLOW, status=FlagStatus.CLEARED, node_key=key,
                               profile=profile.name, limit=None)  # fmt: skip
    t_ref = profile.reference_t_s
    stored = flags.recent_rounds(profile.name, [str(RoundKind.CONFIRMATION)], 4 * cfg.pool_rounds,
                                 node_keys=[key])  # fmt: skip
    attempt = len(earlier) + 1
    test = alone_test(key, alone_rounds(stored, t_ref).get(key, []), attempt, cfg)
    rows = flags.round_results(list(test.round_ids))
    evidence = alone_evidence(test, attempt, cfg, t_ref, rows, screening, in_analysis)
    status = FlagStatus.CONFIRMED if test.flagged else FlagStatus.CLEARED
    fid, _new = raise_flag(flags, SLOW, status, profile.name, [key], test.p_value, test.level,
                           evidence)  # fmt: skip
    log.warning("node %s: alone %d of %d rounds above %.2f x t_ref, p = %.2g (level %.2g): %s "
                "(flag %d)", who(key), test.above, test.n, cfg.floor, test.p_value, test.level,
                "slow" if test.flagged else "cleared", fid)  # fmt: skip
    return fid, test


async def confirm_alone(
    coord: RoundHost, flags: FlagStore, profile: Profile, report: SlownessReport,
    cfg: AloneConfig, skip: Collection[str] = (), rows: Sequence[dict[str, Any]] = (),
    progress: ConfirmProgress | None = None,
) -> list[int]:  # fmt: skip
    """Alone rounds and the test for every nominee of ``report`` not in ``skip``;
    returns the ids stored. A nominee that is not connected (it left) gets no round and
    no test (an empty test would still spend one of its attempts), hence no flag, even
    one the screening test rejected; one that leaves midway gets no more rounds, and
    its test only if a round of this attempt loaded it. A promising attempt is followed
    at once by the next (:func:`netcheck.analysis.alone.extend`), while the node stays.
    ``rows``: the stored result rows of the report's window (the screening rounds'
    latencies and receipts in the evidence); ``progress`` (a job's) counts the rounds."""
    ids = []
    tested = {n.node_key: n for n in report.nodes}
    progress = progress or ConfirmProgress()
    for key in nominees(report, cfg, skip):
        progress.stage = "alone"
        why = nomination(tested[key], report, cfg, rows)
        for in_analysis in range(1, cfg.max_attempts + 1):
            loaded = await _alone_rounds(coord, profile, key, cfg.rounds, progress)
            if not loaded:
                break
            fid, test = await asyncio.to_thread(record_alone_test, flags, profile, key, cfg,
                                                why, in_analysis)  # fmt: skip
            ids.append(fid)
            if not extend(test, in_analysis, cfg):
                break
    return ids


async def _alone_rounds(
    coord: RoundHost, profile: Profile, key: str, rounds: int, progress: ConfirmProgress
) -> int:
    """Up to ``rounds`` confirmation rounds loading only ``key``, while it is
    connected (each counted in ``progress``); returns how many loaded it (0: none run,
    logged)."""
    loaded = 0
    try:
        for i in range(rounds):
            if key not in {s.node_key for s in coord.connected(profile.name)}:
                break
            done = await run_round(coord, profile.name, load={key}, kind=RoundKind.CONFIRMATION,
                                   rule="explicit", context={"slowness": key, "round": i})  # fmt: skip
            progress.rounds_done += 1
            loaded += bool(done.schedule.get(key))
    except RoundError as exc:
        log.warning("alone rounds of %s not run: %s", who(key), exc)
        return 0
    if not loaded:
        log.warning("alone rounds of %s not run: not connected", who(key))
    return loaded
