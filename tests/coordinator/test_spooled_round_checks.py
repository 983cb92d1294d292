"""The after-round checks of a round whose results were spooled (docs/spool.md): they
run once the spool is replayed into the database (by the background replayer, or at the
next start), in the order the rounds ended, exactly once, also when a crash comes
between the checks and the spool's ``checked`` marker.

Before session 14 they were skipped for good: a farm whose rounds ended while the
database was locked kept its result-sharing proof and capacity strikes unflagged.
In-process coordinators (``running_coordinator``) on one SQLite file; the database
outage is another connection's real write lock; a "crash" is a coordinator dropped
without its spool's markers written, and a new one started on the same files.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlite_support import locked
from test_screening_live import FP, T, _join
from test_screening_live import PROFILE as LIVE

from netcheck.config import Profile
from netcheck.coordinator import checks
from netcheck.coordinator.late_checks import after_round_checks, late_checks
from netcheck.coordinator.rounds import run_round
from netcheck.errors import StorageError, StorageUnavailable
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import (
    RunningCoordinator,
    canary_store,
    running_coordinator,
    small_profile,
)
from netcheck.records import (
    Assignment,
    Flag,
    NodeOutcome,
    NodeRecord,
    NodeTiming,
    RoundPlan,
    Verdict,
)
from netcheck.storage import Store
from netcheck.storage.flags import FlagStore

PROFILE = small_profile("spc")
A, B, C = (f"ed25519:{c * 43}" for c in "abc")
#: A node's verdicts in the capacity tests (the pattern of test_capacity_flags): pass,
#: late, wrong answer; strikes at rounds 1, 6 and 8.
CAPACITY_MARKS = ".L.W..L.L"
VERDICTS = {".": Verdict.PASS, "L": Verdict.LATE, "W": Verdict.WRONG_ANSWER}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """The SQLite file of the coordinator's database (``locked(db)`` is its outage)."""
    return tmp_path / "netcheck.db"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    """The coordinator's database on ``db``, with a short busy timeout (a locked write
    fails fast); closed after the test."""
    store = Store(f"sqlite:///{db}", busy_timeout_ms=50)
    yield store
    store.close()


def store_plan(store: Store, rid: str, nodes: Sequence[str]) -> RoundPlan:
    """A stored plan: each node its own prompts (different inputs)."""
    jobs = tuple(
        Assignment(
            n, tuple(f"{rid} {n} prompt {i}" for i in range(4)), (), (), (), bytes(32), bytes(12)
        )  # fmt: skip
        for n in nodes
    )
    plan = RoundPlan(rid, PROFILE.name, 4, 4, jobs, ())
    store.record_plan(plan, time.time())
    return plan


def shared_answers(
    nodes: Sequence[str], shared: Sequence[str]
) -> tuple[list[NodeOutcome], dict[str, NodeRecord]]:
    """Every node passes; the ``shared`` nodes sent one commitment and the same outputs
    for different prompts: answer-level proof of result sharing."""
    outcomes = [NodeOutcome(n, Verdict.PASS, "ok", 1.0, 1, 1) for n in nodes]
    records = {
        n: NodeRecord(
            NodeTiming(rtt_s=0.01, release_start_ns=1_000, arrived_ns=10**9),
            session_id=bytes([i]) * 16,
            outputs=[[7, 7, 7, 7]] * 4 if n in shared else [[i, 1, 2, 3]] * 4,
            commitment=b"\x07" * 32 if n in shared else bytes([i]) * 32,
            signature=bytes([i + 1]) * 64,
        )
        for i, n in enumerate(nodes)
    }
    return outcomes, records


def sharing_flags(store: Store) -> list[Flag]:
    """The result-sharing flags, with their evidence."""
    fs = FlagStore(store)
    found = [fs.get_flag(f.flag_id) for f in fs.list_flags(kind="result-sharing")]
    return [f for f in found if f is not None]


def evidence(flag: Flag) -> dict[str, Any]:
    assert isinstance(flag.evidence, dict)
    return flag.evidence


async def wait_for(cond: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def recording(seen: list[str]) -> Any:
    async def hook(p: Profile, plan: RoundPlan, o: Sequence[NodeOutcome],
                   r: Mapping[str, NodeRecord], *, strict: bool = False) -> list[int]:  # fmt: skip
        seen.append(plan.round_id)
        return []

    return hook


def refused_while(outage: dict[str, bool], checked: list[str] | None = None) -> Any:
    """An after-round hook that refuses (the database is unavailable again) while
    ``outage["on"]``; otherwise it records the round in ``checked``."""

    async def hook(p: Profile, plan: RoundPlan, o: Sequence[NodeOutcome],
                   r: Mapping[str, NodeRecord], *, strict: bool = False) -> list[int]:  # fmt: skip
        if outage["on"]:
            raise StorageUnavailable("database is locked (test: the checks' turn)")
        if checked is not None:
            checked.append(plan.round_id)
        return []

    return hook


def disk_full(entry: Any) -> None:
    """In place of ``Spool.append``: the spool's disk is full."""
    raise StorageError("cannot write the spool: [Errno 28] No space left on device")


async def end_while_locked(
    rc: RunningCoordinator, db: Path, rid: str,
    outcomes: list[NodeOutcome], records: Mapping[str, NodeRecord],
) -> None:  # fmt: skip
    """Round ``rid`` ends while another connection holds the write lock of ``db``: its
    results (checks due) go to the spool."""
    with locked(db):
        how = await asyncio.to_thread(
            rc.coord.recorder.end_round, rid, outcomes, records, status="complete", checks=True
        )
    assert how == "spooled"


def strict_capacity(rc: RunningCoordinator) -> None:
    """Capacity test at p0 2 %, load probability 1/2: three timed strikes in the
    window of CAPACITY_MARKS flag the node at its 8th round."""
    rc.coord.screening.config = rc.coord.config.model_copy(
        update={"capacity_p0": 0.02, "screening_load_probability": 0.5}
    )


def capacity_round(
    store: Store, i: int, mark: str
) -> tuple[RoundPlan, list[NodeOutcome], dict[str, NodeRecord]]:
    """Round ``c{i:03d}`` of node A, stored as planned: (plan, outcomes, records) for a
    verdict ``mark`` of CAPACITY_MARKS; a late node's result came after 9 s, else 1 s."""
    plan = store_plan(store, f"c{i:03d}", [A])
    late = mark == "L"
    out = [NodeOutcome(A, VERDICTS[mark], "test", 9.0 if late else 1.0, 0, 0)]
    timing = NodeTiming(release_start_ns=1_000, rtt_s=0.01,
                        arrived_ns=1_000 + (9 if late else 1) * 10**9)  # fmt: skip
    return plan, out, {A: NodeRecord(timing, commitment=b"\x01" * 32, signature=b"\x02" * 64)}


def capacity_flag(store: Store) -> Flag:
    """The one capacity flag, on node A."""
    fs = FlagStore(store)
    (flag,) = [fs.get_flag(f.flag_id) for f in fs.list_flags(kind="capacity")]
    assert flag is not None and flag.node_keys == (A,)
    return flag


async def test_spooled_rounds_are_checked_after_the_replay_in_round_order(
    tmp_path: Path, db: Path, store: Store
) -> None:
    """Two rounds end while the database is locked (both spooled, no flag: nothing can
    be written); once the lock is gone the background replayer writes them and runs
    their after-round checks in the order they ended: the result sharing of the second
    round is flagged, once, naming that round; the spool is then removed."""
    async with running_coordinator(
        tmp_path, [PROFILE], store=store, storage_retry_s=0.2, spool_replay_s=0.2
    ) as rc:
        seen: list[str] = []
        rc.coord.round_hooks.after_round.append(recording(seen))
        rec = rc.coord.recorder
        store_plan(store, "r1", [A, B, C])
        store_plan(store, "r2", [A, B, C])
        with locked(db):
            for rid, shared in (("r1", ()), ("r2", (A, C))):
                outcomes, records = shared_answers([A, B, C], shared)
                how = await asyncio.to_thread(
                    rec.end_round, rid, outcomes, records, status="complete", checks=True
                )
                assert how == "spooled"
            await asyncio.sleep(0.5)  # replay passes come and wait
            assert seen == [] and set(rec.pending()) == {"r1", "r2"}
        await wait_for(lambda: not rec.spool.path.exists(), 10.0)
        assert seen == ["r1", "r2"]
        (flag,) = sharing_flags(store)
        assert sorted(flag.node_keys) == [A, C]
        assert evidence(flag)["rounds"] == ["r2"]
        statuses = {r["round_id"]: r["status"] for r in store.list_rounds()}
        assert statuses == {"r1": "recorded-late", "r2": "recorded-late"}


async def test_a_restart_runs_the_checks_once_also_after_a_crash_between(
    tmp_path: Path, db: Path, store: Store
) -> None:
    """A coordinator spools a round and dies before any replay; the next one replays it
    at start-up (``recover``) and runs its checks: one result-sharing flag. A crash after
    those checks but before the spool's ``checked`` marker (emulated: the checks run,
    then the marker line is cut off) makes the start after it run them again: still one
    flag, with one occurrence; a further start does nothing."""
    outcomes, records = shared_answers([A, B], (A, B))
    kw: dict[str, Any] = {"store": store, "storage_retry_s": 0.2, "spool_replay_s": 600.0}
    async with running_coordinator(tmp_path, [PROFILE], **kw) as rc:
        store_plan(store, "r1", [A, B])
        await end_while_locked(rc, db, "r1", outcomes, records)
        spool = rc.coord.recorder.spool.path
        before_start = spool.read_bytes()
    assert sharing_flags(store) == []

    async def start(expect_checked: list[str]) -> None:
        async with running_coordinator(tmp_path, [PROFILE], **kw) as rc:
            seen: list[str] = []
            rc.coord.round_hooks.after_round.append(recording(seen))
            assert rc.coord.recorder.spool.path == spool
            assert await rc.coord.recover() == 0  # replayed, not aborted
            assert seen == expect_checked and not spool.exists()
        (flag,) = sharing_flags(store)
        assert evidence(flag)["rounds"] == ["r1"]
        assert "occurrences" not in evidence(flag)  # never merged: one finding

    await start(["r1"])  # replayed at start-up, then checked
    # the crash: the spool as it was before the `checked` line (replayed, unchecked)
    spool.write_bytes(before_start + _replayed_line("r1/end"))
    await start(["r1"])  # checked again: the finding is already stored
    await start([])
    assert store.list_rounds()[0]["status"] == "recorded-late"


def _replayed_line(entry_id: str) -> bytes:
    from netcheck.storage.spool import encode_line

    return encode_line({"type": "replayed", "id": entry_id, "at": time.time()})


async def test_a_late_round_spooled_still_gives_its_capacity_strike(
    tmp_path: Path, db: Path, store: Store
) -> None:
    """A node late at its 3rd timed strike (the pattern of test_capacity_flags: flagged
    at round 8 at p0 2%, load probability 1/2) whose 8th round ends while the database
    is locked: before session 14 that strike was never tested; now the replay runs the
    capacity test and the flag names round 8 among its strike rounds."""
    async with running_coordinator(
        tmp_path, [PROFILE], store=store, storage_retry_s=0.2, spool_replay_s=0.2
    ) as rc:
        strict_capacity(rc)
        for i, mark in enumerate(CAPACITY_MARKS):
            rid, (plan, out, recs) = f"c{i:03d}", capacity_round(store, i, mark)
            if i < len(CAPACITY_MARKS) - 1:  # recorded, checked as run_round does
                rc.coord.recorder.end_round(rid, out, recs, status="complete", checks=True)
                assert await rc.coord.screening.after_round(PROFILE, plan, out, recs) == []
                continue
            await end_while_locked(rc, db, rid, out, recs)
        await wait_for(lambda: not rc.coord.recorder.spool.path.exists(), 10.0)
        assert evidence(capacity_flag(store))["strike_rounds"] == ["c008", "c006", "c001"]


async def test_late_checks_read_the_capacity_window_as_of_their_round(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The strike pattern of the test above, but the database takes round 8's results
    and refuses its checks (it flaps), and keeps refusing while 8 passing rounds are
    recorded (their checks deferred behind round 8's, as ``after_round_checks`` does).
    When the checks run, late and in order, round 8's capacity test reads the window as
    it was at round 8: the flag it would have raised on time, naming c008. Before,
    it read the node's 8 newest verdicts (all passes) and raised nothing: a farm that
    could make the database flap escaped its capacity strikes."""
    real = checks.result_sharing
    outage = {"on": False}

    def flaky(*a: Any) -> list[int]:
        if outage["on"]:
            raise StorageUnavailable("database is locked (test: the checks' turn)")
        return real(*a)

    monkeypatch.setattr(checks, "result_sharing", flaky)
    async with running_coordinator(
        tmp_path, [PROFILE], store=store, storage_retry_s=0.2, spool_replay_s=600.0
    ) as rc:
        strict_capacity(rc)
        rec = rc.coord.recorder
        for i, mark in enumerate(CAPACITY_MARKS + "." * 8):
            rid, (plan, out, recs) = f"c{i:03d}", capacity_round(store, i, mark)
            outage["on"] = i >= 8  # round 8's checks and those after it are refused
            assert rec.end_round(rid, out, recs, status="complete", checks=True) == "recorded"
            assert await after_round_checks(rc.coord, PROFILE, plan, out, recs) == []
        assert [r.round_id for r in rec.unchecked()] == [f"c{i:03d}" for i in range(8, 17)]
        outage["on"] = False
        late = await late_checks(rc.coord)
        assert not late.waiting and rec.unchecked() == []
        flag = capacity_flag(store)
        assert late.flag_ids == [flag.flag_id]
        assert evidence(flag)["strike_rounds"] == ["c008", "c006", "c001"]


async def test_checks_that_hit_the_database_outage_again_are_run_later(
    tmp_path: Path, db: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database is unavailable again while a replayed round's checks run (the first
    result-sharing check refused): the round is not marked checked, and the next
    replayer pass runs its checks (one flag). A recorded round whose own checks were
    refused (``Recorder.defer_checks``, as run_round does) is checked the same way."""
    real = checks.result_sharing
    refused: list[str] = []

    def flaky(*a: Any) -> list[int]:
        if a[2].round_id not in refused:  # the first call of each round
            refused.append(a[2].round_id)
            raise StorageUnavailable("database is locked (test)")
        return real(*a)

    monkeypatch.setattr(checks, "result_sharing", flaky)
    async with running_coordinator(
        tmp_path, [PROFILE], store=store, storage_retry_s=0.2, spool_replay_s=0.2
    ) as rc:
        rec = rc.coord.recorder
        store_plan(store, "r1", [A, B])
        outcomes, records = shared_answers([A, B], (A, B))
        await end_while_locked(rc, db, "r1", outcomes, records)
        await wait_for(lambda: not rec.spool.path.exists(), 10.0)
        assert refused == ["r1"] and len(sharing_flags(store)) == 1

        store_plan(store, "r2", [A, C])
        outcomes, records = shared_answers([A, C], (A, C))
        assert rec.end_round("r2", outcomes, records, status="complete", checks=True) == (
            "recorded"
        )
        plan = rec.stored_plan("r2")
        assert plan is not None
        with pytest.raises(StorageUnavailable):
            await rc.coord.screening.after_round(PROFILE, plan, outcomes, records, strict=True)
        await asyncio.to_thread(rec.defer_checks, "r2", outcomes, records)
        await wait_for(lambda: not rec.spool.path.exists(), 10.0)
        assert refused == ["r1", "r2"]
        assert sorted(f.node_keys for f in sharing_flags(store)) == [(A, B), (A, C)]


def live_store(tmp_path: Path) -> Store:
    """Canaries for the live profile of test_screening_live (nodes answer them), a short
    SQLite busy timeout (a locked write fails fast)."""
    return canary_store(
        tmp_path / "netcheck.db", LIVE, FP, 200, answer=(1,) * T, busy_timeout_ms=50
    )  # fmt: skip


@contextlib.asynccontextmanager
async def live_coordinator(
    tmp_path: Path,
) -> AsyncIterator[tuple[RunningCoordinator, dict[str, str]]]:
    """A coordinator on ``live_store`` (storage retried every 0.2 s, no replayer pass
    within a test) with two nodes joined; yields it and the nodes' keys by name."""
    async with running_coordinator(
        tmp_path, [LIVE], store=live_store(tmp_path), storage_retry_s=0.2, spool_replay_s=600.0
    ) as rc:
        yield rc, await _join(rc, {f"n{i}": MadeUpWorker(FP, T) for i in range(2)})


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[tuple[RunningCoordinator, dict[str, str]]]:
    """``live_coordinator`` (the coordinator, its nodes' keys), stopped after the test."""
    async with live_coordinator(tmp_path) as started:
        yield started


def refusing(checked: list[str], refuse: set[str]) -> Any:
    """An after-round hook that refuses (the database is unavailable again) the first
    time for each round in ``refuse`` and records the rounds it checked, in order."""

    async def hook(p: Profile, plan: RoundPlan, o: Sequence[NodeOutcome],
                   r: Mapping[str, NodeRecord], *, strict: bool = False) -> list[int]:  # fmt: skip
        if plan.round_id in refuse:
            refuse.discard(plan.round_id)
            raise StorageUnavailable("database is locked (test: a second outage)")
        checked.append(plan.round_id)
        return []

    return hook


async def spool_a_round(rc: RunningCoordinator, db: Path, rid: str, nodes: Sequence[str]) -> None:
    """A round of ``nodes`` (live profile) whose results end while the database is locked."""
    rc.coord.store.record_plan(
        RoundPlan(rid, LIVE.name, 4, T, tuple(
            Assignment(n, ("p",), (), (), (), bytes(32), bytes(12)) for n in nodes), ()),
        time.time(),
    )  # fmt: skip
    await end_while_locked(rc, db, rid, *shared_answers(nodes, ()))


async def test_a_round_is_not_checked_before_an_earlier_round_whose_checks_wait(
    db: Path, live: tuple[RunningCoordinator, dict[str, str]]
) -> None:
    """r1's results were spooled; the next round's plan write replays them, and r1's late
    checks then meet a second outage (refused). The new round (recorded directly, the
    database answers again) must not run its own checks before r1's: they are deferred
    behind r1 in the spool, and the next pass checks r1, then the new round. Before, the
    new round was checked at once and r1 after it."""
    rc, keys = live
    checked: list[str] = []
    rc.coord.round_hooks.after_round.append(refusing(checked, {"r1"}))
    await spool_a_round(rc, db, "r1", sorted(keys.values()))
    report = await run_round(rc.coord, LIVE.name)
    assert report.status == "complete"
    assert rc.coord.store.list_rounds(10)[-1]["status"] == "recorded-late"  # r1 replayed
    assert checked == []  # r1 refused; the new round waits behind it
    rec = rc.coord.recorder
    assert [r.round_id for r in rec.unchecked()] == ["r1", report.round_id]
    await rc.coord._late_checks()  # the replayer's pass
    assert checked == ["r1", report.round_id]
    assert not rec.spool.path.exists()


async def test_a_round_waits_for_the_replay_of_an_earlier_spooled_round(
    db: Path, live: tuple[RunningCoordinator, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """r1's results wait in the spool and their replay is refused (the database takes
    the new round's writes but not the replay's: an outage that comes and goes). The new
    round's checks are deferred behind r1's, not run, and not listed before r1 is
    replayed; once it is, r1 is checked first."""
    rc, keys = live
    checked: list[str] = []
    rc.coord.round_hooks.after_round.append(refusing(checked, set()))
    await spool_a_round(rc, db, "r1", sorted(keys.values()))
    rec = rc.coord.recorder

    def refused(entry: Any) -> list[str]:
        raise StorageUnavailable("database is locked (test: the replay's turn)")

    with monkeypatch.context() as m:
        m.setattr(rec, "apply", refused)
        report = await run_round(rc.coord, LIVE.name)
        assert report.status == "complete" and checked == []
        assert set(rec.pending()) == {"r1"}
        assert rec.unchecked() == []  # the new round's checks wait behind r1's replay
        await rc.coord._late_checks()
        assert checked == []
    await asyncio.to_thread(rec.replay)
    await rc.coord._late_checks()
    assert checked == ["r1", report.round_id]
    assert not rec.spool.path.exists()


async def test_checks_refused_while_the_spool_is_unwritable_are_kept_and_block_rounds(
    live: tuple[RunningCoordinator, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round's own checks are refused (the database is unavailable again) and the
    spool cannot be written either (disk full). Before, the round raised: its report
    was lost although its results were recorded, and its checks were lost for good.
    Now its report comes back, its checks are held in memory, the next round is refused
    (409 text: held in memory only) while neither the spool nor the database takes
    them, and once the spool is writable they go to it and run, in order, before the
    next round's own checks."""
    rc, _ = live
    checked: list[str] = []
    outage = {"on": True}
    rc.coord.round_hooks.after_round.append(refused_while(outage, checked))
    rec = rc.coord.recorder
    finished: list[str] = []
    rc.coord.round_hooks.finished.append(lambda report: finished.append(report.round_id))
    real_append = rec.spool.append
    monkeypatch.setattr(rec.spool, "append", disk_full)
    first = await run_round(rc.coord, LIVE.name)
    assert first.status == "complete" and finished == [first.round_id]
    assert rec.held == [f"{first.round_id}/checks"] and checked == []
    n_rounds = len(rc.coord.store.list_rounds(100))
    with pytest.raises(StorageError, match="held in memory only"):
        await run_round(rc.coord, LIVE.name)
    assert len(rc.coord.store.list_rounds(100)) == n_rounds  # nothing planned
    monkeypatch.setattr(rec.spool, "append", real_append)
    await rc.coord._late_checks()  # the replayer's pass: now in the spool, still refused
    assert rec.held == [] and checked == []
    assert [r.round_id for r in rec.unchecked()] == [first.round_id]
    outage["on"] = False
    second = await run_round(rc.coord, LIVE.name)
    assert checked == [first.round_id, second.round_id]
    assert not rec.spool.path.exists()


async def test_an_unwritable_spool_with_the_database_up_does_not_stop_rounds(
    db: Path, live: tuple[RunningCoordinator, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """r1 is replayed, unchecked; then the spool's disk fills up while the database
    works. The next rounds run: r1's checks run first (their ``checked`` marker cannot
    be written: they run again later, idempotent), then each round's own; nothing is
    held, no round is refused. Once the disk is back, r1 is marked and the spool goes."""
    rc, keys = live
    checked: list[str] = []
    rc.coord.round_hooks.after_round.append(refusing(checked, set()))
    await spool_a_round(rc, db, "r1", sorted(keys.values()))
    rec = rc.coord.recorder
    await asyncio.to_thread(rec.replay)
    with monkeypatch.context() as m:
        m.setattr(rec.spool, "append", disk_full)
        second = await run_round(rc.coord, LIVE.name)
        third = await run_round(rc.coord, LIVE.name)
        assert rec.held == []
    assert checked == ["r1", second.round_id, "r1", third.round_id]
    await rc.coord._late_checks()
    assert checked[-1] == "r1" and not rec.spool.path.exists()


@pytest.mark.parametrize("disk_back", [True, False])
async def test_checks_held_at_shutdown_are_spooled_if_they_can_be_else_named_lost(
    tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    disk_back: bool,
) -> None:  # fmt: skip
    """A round's checks are held in memory (database and spool refused them); the
    coordinator then stops before a replayer pass. ``disk_back``: the spool takes writes
    again by then, so the shutdown stores the held entry there and the next start runs
    its checks. Otherwise the shutdown logs an ERROR naming the round whose checks are
    lost. Before, the shutdown did neither: the checks were lost without a word, also
    when the disk was back."""
    async with live_coordinator(tmp_path) as (rc, _):
        rc.coord.round_hooks.after_round.append(refused_while({"on": True}))
        rec = rc.coord.recorder
        monkeypatch.setattr(rec.spool, "append", disk_full)
        first = await run_round(rc.coord, LIVE.name)
        assert first.status == "complete" and rec.held == [f"{first.round_id}/checks"]
        if disk_back:
            monkeypatch.undo()
        caplog.clear()
    lost = [r for r in caplog.records if r.levelname == "ERROR" and "lost" in r.getMessage()]
    if disk_back:
        assert lost == [] and rec.spool.path.exists()
    else:
        assert len(lost) == 1 and first.round_id in lost[0].getMessage()
        monkeypatch.undo()
    kw: dict[str, Any] = {"storage_retry_s": 0.2, "spool_replay_s": 600.0}
    async with running_coordinator(tmp_path, [LIVE], store=Store(f"sqlite:///{db}"), **kw) as rc:
        seen: list[str] = []
        rc.coord.round_hooks.after_round.append(recording(seen))
        await rc.coord.recover()
        assert seen == ([first.round_id] if disk_back else [])
        assert not rc.coord.recorder.spool.path.exists()


async def test_a_timer_round_refused_while_checks_are_held_keeps_the_round_cadence(
    live: tuple[RunningCoordinator, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The screening timer's round is refused while a round's checks are held in memory
    (no new round starts). The refused round must not count: the next round that runs
    is the one that was due (here the full round, every 2nd), not the one after it.
    Before, the round's index advanced on the refusal, so a full round (or the analysis
    due at that index) was skipped."""
    rc, _ = live
    screening = rc.coord.screening
    screening.config = rc.coord.config.model_copy(update={"screening_full_every": 2})
    outage = {"on": True}
    rc.coord.round_hooks.after_round.append(refused_while(outage))
    kinds: list[str] = []
    rc.coord.round_hooks.finished.append(lambda report: kinds.append(report.kind))
    rec = rc.coord.recorder
    monkeypatch.setattr(rec.spool, "append", disk_full)
    await screening.tick()  # round 0 (screening) runs; its checks are held
    assert kinds == ["screening"] and len(rec.held) == 1
    await screening.tick()  # refused: held in memory only (logged, not raised)
    assert kinds == ["screening"]
    monkeypatch.undo()
    outage["on"] = False
    await screening.tick()
    assert kinds == ["screening", "full"] and rec.held == []


async def test_the_last_try_of_held_checks_at_shutdown_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """At shutdown the held checks are run once more; a check that does not come back
    (a database that does not answer at all) holds up the stop for at most
    ``HELD_CHECKS_AT_STOP_S`` (here 0.5 s), then the round is named as lost."""
    from netcheck.coordinator import server

    monkeypatch.setattr(server, "HELD_CHECKS_AT_STOP_S", 0.5, raising=False)
    mode = {"hang": False}

    async def hook(p: Profile, plan: RoundPlan, o: Sequence[NodeOutcome],
                   r: Mapping[str, NodeRecord], *, strict: bool = False) -> list[int]:  # fmt: skip
        if mode["hang"]:
            await asyncio.sleep(60)
        raise StorageUnavailable("database is locked (test: the checks' turn)")

    loop = asyncio.get_running_loop()
    async with live_coordinator(tmp_path) as (rc, _):
        rc.coord.round_hooks.after_round.append(hook)
        monkeypatch.setattr(rc.coord.recorder.spool, "append", disk_full)
        first = await run_round(rc.coord, LIVE.name)
        assert rc.coord.recorder.held == [f"{first.round_id}/checks"]
        mode["hang"] = True
        t0 = loop.time()
    assert loop.time() - t0 < 10.0
    lost = [r.getMessage() for r in caplog.records if "are lost" in r.getMessage()]
    assert len(lost) == 1 and first.round_id in lost[0]
