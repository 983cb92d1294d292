"""PostgreSQL restarted or down mid-round (issue #12 item 4, #16 "Faults"; docs/spool.md):
no verdict or signed receipt that arrived is lost.

The shared test server must never be stopped, so each test starts a private throwaway
cluster with ``scripts/postgres`` (its own directory and port) and stops, starts or
restarts it with ``pg_ctl``. Skipped where PostgreSQL is not configured for the tests.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from fault_support import light_profile, wait_for
from pg_support import pg_ctl
from test_spooled_rounds import StartedWorker, computing, receipts_valid

from netcheck.coordinator.rounds import run_round
from netcheck.lab.load import add_hash_references
from netcheck.lab.testing import running_coordinator
from netcheck.storage import Store

PROFILE = light_profile(result_timeout_s=8.0)


async def _round_with_nodes(tmp_path: Path, url: str, **kw: float) -> tuple[Store, object]:
    store = Store(url)
    add_hash_references(store, PROFILE, 40)
    return store, running_coordinator(tmp_path, [PROFILE], store=store, **kw)


async def test_postgres_down_past_retry_budget_spooled_then_replayed(
    tmp_path: Path, private_pg: tuple[str, dict[str, str]]
) -> None:
    """The server stops while 3 real nodes compute and stays down past the 2 s retry
    budget: the round ends `spooled`; once the server is started again the replay
    writes every verdict and valid receipt (`recorded-late`), matching the notices."""
    url, env = private_pg
    store, ctx = await _round_with_nodes(tmp_path, url, storage_retry_s=2.0, spool_replay_s=0.5)
    async with ctx as rc:  # type: ignore[attr-defined]
        workers = [StartedWorker(PROFILE.max_new_tokens, 2.0) for _ in "abc"]
        clients = [rc.node(w, PROFILE.name) for w in workers]
        for c in clients:
            rc.start(c)
        await rc.wait_connected(3, timeout_s=20.0)
        task = asyncio.ensure_future(run_round(rc.coord, PROFILE.name))
        await computing(workers)
        await asyncio.to_thread(pg_ctl, env, "stop")
        report = await asyncio.wait_for(task, 60.0)
        assert report.status == "spooled"
        rid = report.round_id
        assert rid in rc.coord.recorder.pending()
        await wait_for(lambda: all(c.verdicts for c in clients), 10.0)
        await asyncio.to_thread(pg_ctl, env, "start")
        t_up = time.monotonic()

        def landed() -> bool:
            try:
                return len(store.round_verdicts(rid)) == 3
            except Exception:
                return False

        await wait_for(landed, 30.0, step_s=0.1)
        print(f"PostgreSQL down past the budget: recorded {time.monotonic() - t_up:.2f} s "
              "after the server was back")  # fmt: skip
        rows = receipts_valid(store, rid)
        assert {r["verdict"] for r in rows} == {"pass"}
        stored = {r["node_key"]: (r["verdict"], r["elapsed_s"]) for r in rows}
        assert stored == {o.node_key: (str(o.verdict), o.elapsed_s) for o in report.outcomes}
        for c in clients:
            n = c.verdicts[-1]
            assert n.round_id == rid and (n.verdict, n.elapsed_s) in stored.values()
        await wait_for(lambda: store.list_rounds()[0]["status"] == "recorded-late", 10.0)
        await wait_for(lambda: not rc.coord.recorder.spool.path.exists(), 10.0)
        nxt = await run_round(rc.coord, PROFILE.name)
        assert nxt.status == "complete" and len(store.round_verdicts(nxt.round_id)) == 3
    store.close()


async def test_postgres_restart_mid_round_loses_nothing(
    tmp_path: Path, private_pg: tuple[str, dict[str, str]]
) -> None:
    """``pg_ctl restart`` while the nodes compute: the end-of-round write meets dead
    pooled connections, retries, and stores every verdict and receipt (`complete`)."""
    url, env = private_pg
    store, ctx = await _round_with_nodes(tmp_path, url)
    async with ctx as rc:  # type: ignore[attr-defined]
        workers = [StartedWorker(PROFILE.max_new_tokens, 2.5) for _ in "abc"]
        for w in workers:
            rc.start(rc.node(w, PROFILE.name))
        await rc.wait_connected(3, timeout_s=20.0)
        task = asyncio.ensure_future(run_round(rc.coord, PROFILE.name))
        await computing(workers)
        await asyncio.to_thread(pg_ctl, env, "restart")
        report = await asyncio.wait_for(task, 60.0)
        assert report.status == "complete"
        rows = receipts_valid(store, report.round_id)
        assert len(rows) == 3 and {r["verdict"] for r in rows} == {"pass"}
    store.close()
