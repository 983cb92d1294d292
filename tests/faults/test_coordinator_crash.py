"""The coordinator process is SIGKILLed during a round's collect phase and restarted.

Real processes: ``netcheck coordinator serve`` and a client host of emulated nodes
(``python -m netcheck.lab.load nodes``). After the restart the interrupted round is closed
as ``aborted``; nothing of it is recorded as a result; its canaries stay spent and are
never drawn again; every other canary stays unspent; the nodes reconnect and the next
round records each node exactly once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fault_support import wait_for

from netcheck.admin_client import AdminError
from netcheck.lab.loadrun import LoadRun

pytestmark = pytest.mark.slow

NODES = 4
REFS = 60


async def test_coordinator_killed_mid_round_and_restarted(tmp_path: Path, db_url: str) -> None:
    """SIGKILL in the collect phase, restart: aborted round, no double record, canaries
    spent exactly once, the next round is complete."""
    overrides = {
        "batch_size": 4,
        "max_new_tokens": 4,
        "canaries_min": 1,
        "canaries_max": 2,
        "deadline": {"t_ref_s": 2.0, "a": 1.0, "slack_s": 2.0},
        "dispatch_timeout_s": 5.0,
        "result_timeout_s": 10.0,
    }
    with LoadRun(tmp_path / "run", db_url, overrides) as run:
        run.add_references(REFS)
        run.start_coordinator()
        run.start_hosts(NODES, hosts=1, delay_s=2.0)
        await run.wait_connected(NODES, timeout_s=20)
        store = run.store()
        try:
            round_task = asyncio.create_task(run.run_round())
            await wait_for(lambda: bool(store.list_rounds()), 10.0, step_s=0.05)
            (planned,) = store.list_rounds()
            assert planned["status"] == "planned"
            await asyncio.sleep(0.5)  # acks and release take milliseconds; nodes need 2 s
            run.kill_coordinator()
            with pytest.raises(AdminError):
                await round_task
            rid = planned["round_id"]
            spent = store.canary_ids_used()
            assert spent and store.count_references(unspent_only=True) == REFS - len(spent)
            assert store.round_verdicts(rid) == []

            run.start_coordinator()  # app.serve aborts unfinished rounds once it holds the port
            await run.wait_connected(NODES, timeout_s=20)
            (aborted,) = store.list_rounds()
            assert aborted["status"] == "aborted" and aborted["finished_at"] is not None
            assert store.canary_ids_used() == spent
            assert store.count_references(unspent_only=True) == REFS - len(spent)

            report = await run.run_round()
        finally:
            store.close()
        assert [v["verdict"] for v in report["verdicts"]] == ["pass"] * NODES
        counts = run.counts()
        assert counts["rounds"] == 2
        assert counts["results"] == counts["results_distinct"] == NODES
        assert counts["verdicts"] == counts["verdicts_distinct"] == NODES
        with run.store() as s2:
            assert s2.round_verdicts(rid) == []
            rows = s2.round_assignments(report["round_id"])
            fresh = {c for r in rows for c in r["canary_ids"]}
            assert fresh and fresh.isdisjoint(spent)
            assert counts["canaries_spent"] == len(spent) + len(fresh)
            assert s2.count_references(unspent_only=True) == REFS - len(spent) - len(fresh)
