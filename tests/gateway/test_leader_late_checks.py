"""The after-round checks of a cluster round follow the coordinator's rules
(docs/spool.md, "After-round checks of a spooled round"): checks the database refuses
are deferred to the leader's spool, not lost; they run in the order the rounds ended;
and when the spool cannot be written either they are held in memory and no new round
starts until they are stored or run.

Until session 15 the leader ran the checks non-strict: a refusal was logged and the
round's checks were lost for good. A real gateway (leader) on PostgreSQL with emulated
nodes (HashWorker); the database refuses the checks through the first check's storage
call (``StorageUnavailable``, as a locked or unreachable database gives), and the full
disk is the spool's ``append`` failing. Skipped where PostgreSQL is not configured.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from gw_support import FAST, PROFILE, leader_of

from netcheck.coordinator import checks
from netcheck.errors import StorageError, StorageUnavailable
from netcheck.lab.gateways import running_gateway
from netcheck.lab.load import HashWorker, add_hash_references
from netcheck.lab.testing import RunningCoordinator
from netcheck.storage import Store


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    """The cluster's database, with references for 60 rounds; closed after the test."""
    store = Store(pg_url)
    add_hash_references(store, PROFILE, 60)
    yield store
    store.close()


@pytest.fixture
def refused(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, bool], list[str]]:
    """While ``outage["on"]`` (at first), the first check of a round meets an
    unavailable database; otherwise it runs for real. (outage, the rounds checked, in
    order)."""
    real = checks.result_sharing
    outage = {"on": True}
    checked: list[str] = []

    def first_check(*a: Any) -> list[int]:
        if outage["on"]:
            raise StorageUnavailable("database is unreachable (test: the checks' turn)")
        checked.append(a[2].round_id)
        return real(*a)

    monkeypatch.setattr(checks, "result_sharing", first_check)
    return outage, checked


async def _leader_with_nodes(a: RunningCoordinator) -> RunningCoordinator:
    for _ in range(2):
        a.start(a.node(HashWorker(PROFILE.max_new_tokens), PROFILE.name))
    await a.wait_connected(2)
    return await leader_of(a)


@pytest.fixture
async def leader(
    tmp_path: Path, pg_url: str, store: Store, refused: tuple[dict[str, bool], list[str]]
) -> AsyncIterator[RunningCoordinator]:
    """The leader of a one-gateway cluster on ``store`` with two nodes, the checks
    refused (``refused``); no replayer pass within a test. Stopped after the test."""
    async with running_gateway(
        tmp_path, pg_url, "gw-a", [PROFILE], Ed25519PrivateKey.generate(), **FAST,
        spool_replay_s=600.0,
    ) as a:  # fmt: skip
        yield await _leader_with_nodes(a)


def disk_full(entry: Any) -> None:
    """In place of ``Spool.append``: the spool's disk is full."""
    raise StorageError("cannot write the spool: [Errno 28] No space left on device")


async def test_cluster_round_checks_refused_are_deferred_and_run_in_order(
    leader: RunningCoordinator, refused: tuple[dict[str, bool], list[str]]
) -> None:
    """r1's checks are refused: deferred to the leader's spool (before: logged, lost).
    r2 finds r1's checks still refused: its own are deferred behind them, not run
    first. Once the database answers, the replayer's pass checks r1, then r2."""
    outage, checked = refused
    rec = leader.coord.recorder
    r1 = await leader.coord.start_round(PROFILE.name)
    assert r1.status == "complete" and checked == []
    assert [r.round_id for r in rec.unchecked()] == [r1.round_id]
    r2 = await leader.coord.start_round(PROFILE.name)
    assert r2.status == "complete" and checked == []
    assert [r.round_id for r in rec.unchecked()] == [r1.round_id, r2.round_id]
    outage["on"] = False
    await leader.coord._late_checks()  # type: ignore[attr-defined]  # the replayer's pass
    assert checked == [r1.round_id, r2.round_id]
    assert not rec.spool.path.exists()


async def test_cluster_round_checks_held_when_the_spool_is_unwritable_block_rounds(
    store: Store, leader: RunningCoordinator, refused: tuple[dict[str, bool], list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """r1's checks are refused and the leader's spool cannot be written (disk full): r1's
    report still comes back, its checks are held in memory, and the next round is
    refused (nothing planned) while neither the spool nor the database takes them. With
    both back, the next round checks r1 first, then itself."""
    outage, checked = refused
    rec = leader.coord.recorder
    real_append = rec.spool.append
    monkeypatch.setattr(rec.spool, "append", disk_full)
    r1 = await leader.coord.start_round(PROFILE.name)
    assert r1.status == "complete"
    assert rec.held == [f"{r1.round_id}/checks"] and checked == []
    n_rounds = len(store.list_rounds(100))
    with pytest.raises(StorageError, match="held in memory only"):
        await leader.coord.start_round(PROFILE.name)
    assert len(store.list_rounds(100)) == n_rounds  # nothing planned
    monkeypatch.setattr(rec.spool, "append", real_append)
    outage["on"] = False
    r2 = await leader.coord.start_round(PROFILE.name)
    assert r2.status == "complete" and rec.held == []
    assert checked == [r1.round_id, r2.round_id]
    assert not rec.spool.path.exists()


async def test_the_round_timer_survives_a_bug_in_an_after_round_check(
    tmp_path: Path, pg_url: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check that raises a bug (not a storage error) fails the cluster round after its
    close; the leader's round timer logs it and runs the next round. Before, the
    exception ended the timer task for good (no more timed rounds until a restart)."""
    tried: list[str] = []

    def buggy(*a: Any) -> list[int]:
        tried.append(a[2].round_id)
        raise ZeroDivisionError("a bug in a check (test)")

    monkeypatch.setattr(checks, "result_sharing", buggy)
    async with running_gateway(
        tmp_path, pg_url, "gw-a", [PROFILE], Ed25519PrivateKey.generate(), **FAST,
        round_interval_s=0.3,
    ) as a:  # fmt: skip
        await _leader_with_nodes(a)
        for _ in range(300):
            if len(tried) >= 3:
                break
            await asyncio.sleep(0.05)
    assert len(tried) >= 3, f"the round timer stopped after {len(tried)} round(s)"


async def test_a_restarted_gateway_runs_its_deferred_checks_at_start(
    tmp_path: Path, pg_url: str, store: Store, refused: tuple[dict[str, bool], list[str]]
) -> None:
    """r1's checks are refused and deferred to the leader's spool; the gateway stops.
    At its next start (the database answers again) they run during ``start_cluster``,
    before any round, as ``coordinator serve`` runs them in ``recover()``. Before, only
    the spool was replayed at start: the checks waited for the replayer's first pass,
    ``spool_replay_s`` (here 600 s) later."""
    outage, checked = refused
    key = Ed25519PrivateKey.generate()
    async with running_gateway(
        tmp_path, pg_url, "gw-a", [PROFILE], key, **FAST, spool_replay_s=600.0
    ) as a:  # fmt: skip
        leader = await _leader_with_nodes(a)
        r1 = await leader.coord.start_round(PROFILE.name)
        assert r1.status == "complete" and checked == []
        spool = leader.coord.recorder.spool.path
        assert spool.exists()
    outage["on"] = False
    async with running_gateway(
        tmp_path, pg_url, "gw-a", [PROFILE], key, **FAST, spool_replay_s=600.0
    ) as b:  # fmt: skip
        assert checked == [r1.round_id]  # at start, no round run, no replayer pass yet
        assert b.coord.recorder.spool.path == spool and not spool.exists()
