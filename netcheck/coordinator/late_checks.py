"""After-round checks that run late: those of rounds whose results were spooled (the
database was down at the round's end) or whose own checks the database refused. They run
one round at a time, in the order the rounds ended, before any later round's own checks;
kept in the spool (or, if it cannot be written, in memory, and no new round starts
meanwhile) until they ran. Used by the round runner (:mod:`netcheck.coordinator.rounds`),
the coordinator's start-up and replayer (:mod:`netcheck.coordinator.server`) and the
gateway leader. The rules and their reasons: docs/spool.md.

**A check that raises a bug** (anything but a :class:`StorageError`), in a round's own
checks or in late ones: the round's results are recorded, so its report still goes out
(before session 16 a bug in a round's own checks failed the round's request although
its results were stored). The failure is logged at ERROR with the round id and the
trace, listed in :func:`check_bugs` (``GET /admin/status``, ``after_round_check_bugs``),
and the round's checks are kept: a round's own go to the spool as a checks-only entry
(as for a storage outage), and are tried again at the next calls, up to
:data:`BUG_TRIES` tries per process; after that this process leaves them in the spool
(one more ERROR says so) and the next start tries them again. Why hold rather than
only report: a round whose checks never ran is a round that proved nothing about its
nodes (docs/spool.md: a free round), and a check that an input makes raise could be
an input a node chose; kept in the spool, a fixed release runs them at its start-up.
Why bounded: a bug is usually deterministic, so trying it at every round of a long
run would only repeat the trace. A round with a bug holds no later round back (the
later rounds are checked meanwhile: a bug must not stop every round after it), and no
new round is refused for it (only checks held in memory, with the spool unwritable,
do that: :func:`refuse_while_checks_held`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netcheck.config import Profile
from netcheck.coordinator.hooks import RoundHost
from netcheck.errors import StorageError
from netcheck.records import NodeOutcome, NodeRecord, RoundPlan

log = logging.getLogger("netcheck.round")


#: Tries, per process, of the after-round checks of a round whose checks raised a bug
#: (module docstring); then they wait in the spool for the next start.
BUG_TRIES = 3


@dataclass
class CheckBug:
    """A round whose after-round checks raised a bug and have not run since: the last
    ``error`` (type and message), ``tries`` in this process, ``at`` (Unix seconds of the
    last try); ``given_up``: this process tries them no more (:data:`BUG_TRIES`)."""

    round_id: str
    error: str = ""
    tries: int = 0
    at: float = 0.0

    @property
    def given_up(self) -> bool:
        return self.tries >= BUG_TRIES

    def as_dict(self) -> dict[str, Any]:
        return {"round_id": self.round_id, "error": self.error, "tries": self.tries,
                "at": self.at, "given_up": self.given_up}  # fmt: skip


# Per recorder (one per coordinator or gateway leader): round id -> its CheckBug; in
# memory only (the checks themselves are in the spool), gone with the recorder.
_BUGS: weakref.WeakKeyDictionary[Any, dict[str, CheckBug]] = weakref.WeakKeyDictionary()


def check_bugs(coord: RoundHost) -> list[CheckBug]:
    """The rounds of ``coord`` whose after-round checks raised a bug in this process and
    have not run since, oldest first (``GET /admin/status``)."""
    return list(_BUGS.get(coord.recorder, {}).values())


def _note_bug(coord: RoundHost, round_id: str, exc: BaseException) -> CheckBug:
    """Count a try of ``round_id``'s checks that raised ``exc`` and log it at ERROR, with
    the trace (the caller is in its ``except`` block)."""
    bug = _BUGS.setdefault(coord.recorder, {}).setdefault(round_id, CheckBug(round_id))
    bug.tries, bug.error, bug.at = bug.tries + 1, f"{type(exc).__name__}: {exc}", time.time()
    log.error("round %s: after-round checks failed (a bug: %s; try %d of %d in this process): "
              "the round's results stand; its checks are kept in the spool and tried again%s",
              round_id, bug.error, bug.tries, BUG_TRIES,
              " at the next start (given up in this process)" if bug.given_up else
              " before the next round's", exc_info=True)  # fmt: skip
    return bug


@dataclass
class LateChecks:
    """What :func:`late_checks` did: ``flag_ids`` raised, and ``waiting``: the checks of
    some earlier round still wait for storage (the database refused its replay or its
    checks, or the spool could not be read or marked), so no later round may be checked
    before it: the caller defers a new round's own checks behind it."""

    flag_ids: list[int] = field(default_factory=list)
    waiting: bool = False


async def late_checks(coord: RoundHost) -> LateChecks:
    """The after-round checks (``coord.round_hooks.after_round``) of every round whose
    results were spooled and are now replayed into the database, or whose own checks
    were deferred (:meth:`~netcheck.storage.durable.Recorder.checks_backlog`), one round
    at a time in the order they ended; each is marked checked in the spool after its
    checks ran, so a crash in between runs them again at most once more (the checks skip
    a finding already stored for the same rounds: docs/spool.md). The caller holds the
    round lock (or nothing else runs rounds yet).

    A database or spool failure (a check that hits a locked or unreachable database too)
    is logged and leaves that round and the rest for the next call, as does a round
    whose records still wait for their replay: ``waiting`` is then set, and a round
    recorded now must defer its own checks behind them (:func:`after_round_checks`). A round
    whose checks ran but whose ``checked`` marker the spool refused is not waiting (its
    checks ran in order; they run again at the next call, finding nothing new). Any other
    error of a check (a bug) is logged with its trace and leaves that round unchecked for
    the next call while the later rounds still run (one bad round must not stop start-up
    or every round after it), up to :data:`BUG_TRIES` tries per process (module
    docstring); it does not set ``waiting``."""
    done = LateChecks()
    try:
        late, waits_for = await asyncio.to_thread(coord.recorder.checks_backlog)
        for r in late:
            profile = None if r.plan is None else coord.profiles.get(r.plan.profile)
            if r.plan is None or profile is None:
                log.error("round %s: replayed, but its after-round checks cannot run "
                          "(round or profile not found)", r.round_id)  # fmt: skip
            else:
                bugs = _BUGS.get(coord.recorder, {})
                if r.round_id in bugs and bugs[r.round_id].given_up:
                    continue  # kept in the spool for the next start (logged at the last try)
                log.warning("round %s: replayed from the spool; its after-round checks run "
                            "now", r.round_id)  # fmt: skip
                try:
                    for after in coord.round_hooks.after_round:
                        done.flag_ids += await after(
                            profile, r.plan, r.outcomes, r.records, strict=True
                        )
                except StorageError:
                    raise
                except Exception as exc:  # a bug in a check: keep the round (module docstring)
                    _note_bug(coord, r.round_id, exc)
                    continue
                bugs.pop(r.round_id, None)
            try:
                await asyncio.to_thread(coord.recorder.mark_checked, r.entry_id)
            except StorageError as exc:  # they ran, in order: later rounds may follow
                log.error("round %s: after-round checks ran, but the spool could not mark "
                          "them (%s); they run again at the next call (a finding already "
                          "stored is not raised twice)", r.round_id, exc)  # fmt: skip
        if waits_for is not None:
            done.waiting = True
            log.info("after-round checks wait for the replay of spool entry %s (the rounds "
                        "after it are checked after it)", waits_for)  # fmt: skip
    except StorageError as exc:
        done.waiting = True
        log.error("after-round checks of replayed rounds wait: %s", exc)
    return done


async def _defer_checks(
    coord: RoundHost,
    round_id: str,
    outcomes: Sequence[NodeOutcome],
    records: Mapping[str, NodeRecord],
) -> None:
    """Keep a recorded round's after-round checks for :func:`late_checks`: in the spool,
    or, if the spool cannot be written either, in memory (logged as an error; the next
    round is refused until they are stored or run: :func:`refuse_while_checks_held`).
    Never raises: the round's results are recorded and its report goes out."""
    await asyncio.to_thread(coord.recorder.defer_checks, round_id, outcomes, records)


async def after_round_checks(
    coord: RoundHost,
    profile: Profile,
    plan: RoundPlan,
    outcomes: Sequence[NodeOutcome],
    records: Mapping[str, NodeRecord],
) -> list[int]:
    """A recorded round's own after-round checks (``coord.round_hooks.after_round``,
    strict), after the checks of earlier rounds that wait (:func:`late_checks`), so
    rounds are checked in the order they ended. If an earlier round's checks still wait,
    or the database refuses this round's (``StorageUnavailable``), they are deferred
    (:func:`_defer_checks`: the spool, else memory) and run later by :func:`late_checks`.
    A check that raises a bug (anything else) is logged at ERROR with the round id,
    listed in :func:`check_bugs`, and its round's checks are deferred the same way, to
    be tried again (module docstring): the round's results are recorded, so this
    returns normally and the round's report goes out. Used by
    :func:`~netcheck.coordinator.rounds.run_round` and by the gateway leader's cluster
    rounds. The caller holds the round lock. Returns the ids of the flags raised now
    (none of a hook that raised). Raises nothing but a cancellation."""
    flag_ids: list[int] = []
    round_id = plan.round_id
    if (await late_checks(coord)).waiting:  # earlier rounds first, in the order they ended
        # an earlier round's checks still wait for the database: this round's must not
        # run before them (its strikes and proof would be read without the earlier
        # round's); they are deferred behind them in the spool, run in order later
        log.warning("round %s: after-round checks of earlier rounds wait for the database; "
                    "this round's run after them (docs/spool.md)", round_id)  # fmt: skip
        await _defer_checks(coord, round_id, outcomes, records)
        return flag_ids
    try:
        for after in coord.round_hooks.after_round:
            flag_ids += await after(profile, plan, outcomes, records, strict=True)
    except StorageError as exc:  # locked or unreachable: run them after the outage
        log.error("round %s: after-round checks wait for the database: %s", round_id, exc)
        await _defer_checks(coord, round_id, outcomes, records)
    except Exception as exc:  # a bug in a check: the round's results stand; keep its checks
        _note_bug(coord, round_id, exc)
        await _defer_checks(coord, round_id, outcomes, records)
    return flag_ids


async def refuse_while_checks_held(coord: RoundHost) -> None:
    """Before a new round: after-round checks held in memory only (neither the spool nor
    the database took them, :meth:`~netcheck.storage.durable.Recorder.defer_checks`) are
    stored in the spool or run now if either works again; if some are still held, no
    new round starts (fail-safe: a round's checks are persisted before the next round is
    run, so a crash loses at most those of the last round).

    Raises:
        StorageError: checks are still held; the message names the rounds and the spool.
    """
    if not coord.recorder.held:
        return
    await late_checks(coord)
    if held := coord.recorder.held:
        raise StorageError(
            f"no new round: the after-round checks of {len(held)} recorded round(s) "
            f"({', '.join(h.removesuffix('/checks') for h in held)}) are held in memory only: "
            f"the spool {coord.recorder.spool.path} cannot be written, and the checks "
            "cannot run yet (the database refuses them, or an earlier round's); free or "
            "fix the spool's disk (retried every spool_replay_s and before every round)"
        )
