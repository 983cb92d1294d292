"""PostgreSQL restarted in the middle of a multi-gateway round (docs/gateways.md,
"Faults"): no verdict or receipt is lost, none is recorded twice.

The shared test server must never be stopped, so this test starts a private throwaway
cluster with ``scripts/postgres`` (its own directory and port) and restarts it with
``pg_ctl restart -m fast``. Skipped where PostgreSQL is not configured for the tests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from gw_support import FAST, PROFILE, until
from pg_support import pg_ctl

from netcheck.keys import public_key_text
from netcheck.lab.gateways import running_gateway
from netcheck.lab.load import HashWorker, add_hash_references
from netcheck.storage import Store
from netcheck.storage.cluster import ClusterStore


async def test_postgres_restart_mid_round(
    tmp_path: Path, private_pg: tuple[str, dict[str, str]]
) -> None:
    """The database restarts while the nodes of two gateways compute: every node still
    gets exactly one verdict (pass) with its signed receipt, and the round ends complete
    or aborted (never open); the next round completes."""
    url, env = private_pg
    store = Store(url)
    add_hash_references(store, PROFILE, 60)
    cluster = ClusterStore(store)
    ident = Ed25519PrivateKey.generate()
    async with (
        running_gateway(tmp_path, url, "gw-a", [PROFILE], ident, **FAST) as a,
        running_gateway(tmp_path, url, "gw-b", [PROFILE], ident, **FAST) as b,
    ):
        keys = set()
        for rc in (a, b):
            for _ in range(2):
                c = rc.node(HashWorker(PROFILE.max_new_tokens, 2.5), PROFILE.name)
                rc.start(c)
                keys.add(public_key_text(c.identity))
            await rc.wait_connected(2)
        leader = a if a.coord.control.is_leader else b  # type: ignore[attr-defined]
        task = asyncio.ensure_future(leader.coord.start_round(PROFILE.name))
        found: list[str] = []

        async def released() -> bool:
            rows = await asyncio.to_thread(cluster.open_rounds)
            found[:] = [r["round_id"] for r in rows if r["state"] == "released"]
            return bool(found)

        await until(released, 30.0)
        await asyncio.to_thread(pg_ctl, env, "restart")
        outcome = await asyncio.gather(asyncio.wait_for(task, 120.0), return_exceptions=True)
        round_id = found[0]

        async def settled() -> bool:
            try:
                r = await asyncio.to_thread(cluster.get_round, round_id)
                v = await asyncio.to_thread(store.round_verdicts, round_id)
            except Exception:
                return False
            return r is not None and r["state"] in ("closed", "aborted") and len(v) == 4

        await until(settled, 90.0)
        rows = store.round_verdicts(round_id)
        assert {r["node_key"] for r in rows} == keys, outcome
        assert {r["verdict"] for r in rows} == {"pass"}
        assert all(r["signature"] and r["session_id"] and r["commitment"] for r in rows)
        status = {r["round_id"]: r["status"] for r in store.list_rounds()}[round_id]
        assert status in ("complete", "aborted")
        for rc in (a, b):
            await until(lambda rc=rc: len(rc.coord.sessions) == 2, 30.0)
        new_leader = a if a.coord.control.is_leader else b  # type: ignore[attr-defined]
        await until(lambda: len(cluster.connected_nodes()) == 4, 30.0)
        report = await new_leader.coord.start_round(PROFILE.name)
        assert report.status == "complete"
        assert {str(o.verdict) for o in report.outcomes} == {"pass"} and len(report.outcomes) == 4
    store.close()
