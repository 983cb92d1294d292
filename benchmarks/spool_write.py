"""Cost of the round-results spool (docs/spool.md, issue #12 item 4), per node result.

For rounds of N nodes (realistic evidence: 16 outputs x 16 token ids, 32-byte
commitment, 64-byte receipt signature, timing stamps and budget), measured in the same
run on the same disk:

- ``direct``: the baseline, ``Store.record_outcome`` + ``finish_round`` into a fresh
  SQLite round (what every round does when the database is available);
- ``spool``: ``Recorder.end_round`` with the database write-locked by another
  connection and a zero retry budget, i.e. one failed attempt (SQLite busy timeout
  1 ms) then the JSON encoding, the append and its fsync;
- ``replay``: writing that spool entry into the database (``Recorder.replay``).

Then ``--lock-s`` (default 7 s): a real round (running_coordinator, emulated nodes
computing 1 s) whose database is write-locked by another connection after the plan is
stored, for longer than the 1 s retry budget; prints how long after the lock's release
the results were in the database (replay interval 0.5 s).

Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/spool_write.py [--nodes 10 100 1000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from netcheck.records import NodeOutcome, NodeRecord, NodeTiming, RoundPlan, Verdict
from netcheck.storage import Store
from netcheck.storage.durable import Recorder


def _results(n: int) -> tuple[list[NodeOutcome], dict[str, NodeRecord]]:
    keys = [f"ed25519:{i:043d}" for i in range(n)]
    outcomes = [
        NodeOutcome(k, Verdict.PASS, "ok", 1.234 + i * 1e-3, 2, 2) for i, k in enumerate(keys)
    ]
    t = 1_700_000_000_000_000_000
    records = {
        k: NodeRecord(
            NodeTiming(
                rtt_s=0.0012,
                deadline_s=3.5,
                job_sent_ns=t,
                acked_ns=t + 10**6,
                release_start_ns=t + 10**8 + i,
                release_end_ns=t + 10**8 + i + 900,
                arrived_ns=t + 2 * 10**9 + i,
                processed_ns=t + 2 * 10**9 + i + 5000,
            ),
            session_id=i.to_bytes(16, "big"),
            outputs=[[(i * 7 + j * 31 + p) % 128_000 for j in range(16)] for p in range(16)],
            commitment=bytes(32),
            signature=bytes(64),
            budget={"release_index": i},
        )  # fmt: skip
        for i, k in enumerate(keys)
    }
    return outcomes, records


def measure(n: int, repeats: int, where: Path) -> dict[str, float]:
    """Median seconds per node result of direct, spool and replay for rounds of ``n``."""
    db = where / f"bench-{n}.db"
    store = Store(f"sqlite:///{db}", busy_timeout_ms=1)
    rec = Recorder(store, where / f"spool-{n}.jsonl", retry_s=0.0)
    outcomes, records = _results(n)
    direct, spool, replay = [], [], []
    for r in range(repeats):
        for rid in (f"d{r}", f"s{r}"):
            store.record_plan(RoundPlan(rid, "p", 16, 16, (), ()), time.time())
        t0 = time.perf_counter()
        store.record_outcome(f"d{r}", outcomes, records)
        store.finish_round(f"d{r}", "complete", {})
        direct.append(time.perf_counter() - t0)
        lock = sqlite3.connect(db, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        t0 = time.perf_counter()
        how = rec.end_round(f"s{r}", outcomes, records, status="complete", summary={})
        spool.append(time.perf_counter() - t0)
        lock.execute("ROLLBACK")
        lock.close()
        assert how == "spooled"
        t0 = time.perf_counter()
        report = rec.replay()
        replay.append(time.perf_counter() - t0)
        assert report.replayed == [f"s{r}/end"], report
        assert len(store.round_verdicts(f"s{r}")) == n
    store.close()
    return {
        "direct": statistics.median(direct) / n,
        "spool": statistics.median(spool) / n,
        "replay": statistics.median(replay) / n,
    }


async def lock_round(
    lock_s: float, where: Path, retry_s: float = 1.0, busy_ms: int = 300
) -> tuple[str, float, float]:
    """(report status, seconds from taking the lock until the round ended, seconds from
    the lock's release until its results were in the database: negative if they were in
    before the release could matter, i.e. never) for one real round of 3 emulated nodes,
    the lock taken while they compute."""
    from netcheck.config import DeadlineParams
    from netcheck.coordinator.rounds import run_round
    from netcheck.lab.load import HashWorker, add_hash_references
    from netcheck.lab.testing import running_coordinator, small_profile

    profile = small_profile("bench", canaries_max=2, deadline=DeadlineParams(t_ref_s=1.0, slack_s=2.0),
                            dispatch_timeout_s=2.0, result_timeout_s=5.0)  # fmt: skip
    where = where / f"lock-{retry_s}"
    where.mkdir()
    db = where / "lock.db"
    store = Store(f"sqlite:///{db}", busy_timeout_ms=busy_ms)
    add_hash_references(store, profile, 30)
    async with running_coordinator(
        where, [profile], store=store, storage_retry_s=retry_s, spool_replay_s=0.5
    ) as rc:
        started: list[int] = []

        class Worker(HashWorker):  # EMULATION: HashWorker that says when it starts
            async def run(self, prompts: Sequence[str]) -> list[list[int]]:
                started.append(1)
                return await super().run(prompts)

        for _ in range(3):
            rc.start(rc.node(Worker(profile.max_new_tokens, 1.0), profile.name))
        await rc.wait_connected(3)
        task = asyncio.ensure_future(run_round(rc.coord, profile.name))
        while len(started) < 3:  # lock while the nodes compute (plan and dispatch done)
            await asyncio.sleep(0.005)
        lock = sqlite3.connect(db, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        t_locked = time.monotonic()

        async def release() -> float:
            await asyncio.sleep(lock_s)
            lock.execute("ROLLBACK")
            lock.close()
            return time.monotonic()

        releaser = asyncio.ensure_future(release())
        report = await task
        ended = time.monotonic() - t_locked
        t_free = await releaser
        while len(store.round_verdicts(report.round_id)) < 3:
            await asyncio.sleep(0.01)
        return report.status, ended, time.monotonic() - t_free


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--lock-s", type=float, default=7.0)
    args = ap.parse_args()
    logging.getLogger("netcheck").setLevel(logging.CRITICAL)  # the spooling is on purpose
    with tempfile.TemporaryDirectory(prefix="netcheck-spool-bench-") as tmp:
        where = Path(tmp)
        print(f"{'nodes':>6} {'direct µs/node':>15} {'spool µs/node':>14} {'ratio':>6} "
              f"{'replay µs/node':>15}")  # fmt: skip
        for n in args.nodes:
            m = measure(n, args.repeats, where)
            print(f"{n:>6} {m['direct'] * 1e6:>15.1f} {m['spool'] * 1e6:>14.1f} "
                  f"{m['spool'] / m['direct']:>6.2f} {m['replay'] * 1e6:>15.1f}")  # fmt: skip
        if args.lock_s > 0:
            for retry_s, busy_ms, what in (
                (1.0, 300, "1 s retry budget, 300 ms busy timeout"),
                (10.0, 5000, "defaults: 10 s budget, 5 s busy"),
            ):
                status, ended, resolved = asyncio.run(
                    lock_round(args.lock_s, where, retry_s, busy_ms)
                )
                print(f"{args.lock_s:.0f} s lock, {what}, 0.5 s replay: round ended "
                      f"({status}) {ended:.2f} s after the lock was taken; results in the "
                      f"database {resolved:+.2f} s after the lock's release")  # fmt: skip


if __name__ == "__main__":
    main()
