"""PostgreSQL down past a gateway's retry budget when it records its nodes' results
(docs/spool.md, "Gateways"): each gateway's verdicts and receipts go to its own fsynced
spool before it reports, and reach the database once the server is back; the leader's
close then finds them (no node recorded `disconnected`, nothing lost or doubled).

Private throwaway cluster (the shared test server is never stopped). Skipped where
PostgreSQL is not configured for the tests.
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


async def test_postgres_down_past_budget_gateways_spool_then_report(
    tmp_path: Path, private_pg: tuple[str, dict[str, str]]
) -> None:
    """The server stops right after release and stays down until both gateways have
    spooled their members' results (1 s budget); started again, every node has exactly
    one `pass` verdict with its receipt, the round closes, the spools are gone."""
    url, env = private_pg
    store = Store(url)
    add_hash_references(store, PROFILE, 60)
    cluster = ClusterStore(store)
    ident = Ed25519PrivateKey.generate()
    fast = {**FAST, "storage_retry_s": 1.0, "spool_replay_s": 0.5}
    async with (
        running_gateway(tmp_path, url, "gw-a", [PROFILE], ident, **fast) as a,
        running_gateway(tmp_path, url, "gw-b", [PROFILE], ident, **fast) as b,
    ):
        keys = set()
        for rc in (a, b):
            for _ in range(2):
                c = rc.node(HashWorker(PROFILE.max_new_tokens, 2.0), PROFILE.name)
                rc.start(c)
                keys.add(public_key_text(c.identity))
            await rc.wait_connected(2)
        await until(lambda: len(cluster.connected_nodes()) == 4, 30.0)
        leader = a if a.coord.control.is_leader else b  # type: ignore[attr-defined]
        task = asyncio.ensure_future(leader.coord.start_round(PROFILE.name))
        found: list[str] = []

        async def released() -> bool:
            rows = await asyncio.to_thread(cluster.open_rounds)
            found[:] = [r["round_id"] for r in rows if r["state"] == "released"]
            return bool(found)

        await until(released, 30.0)
        await asyncio.to_thread(pg_ctl, env, "stop")
        rid = found[0]
        try:
            await until(lambda: all(rid in g.coord.recorder.pending() for g in (a, b)), 30.0)
            spools = [g.coord.recorder.spool.path for g in (a, b)]
            assert all(p.exists() for p in spools) and spools[0] != spools[1]
        finally:
            await asyncio.to_thread(pg_ctl, env, "start")
        outcome = await asyncio.gather(asyncio.wait_for(task, 180.0), return_exceptions=True)

        async def settled() -> bool:
            try:
                r = await asyncio.to_thread(cluster.get_round, rid)
                v = await asyncio.to_thread(store.round_verdicts, rid)
            except Exception:
                return False
            return r is not None and r["state"] in ("closed", "aborted") and len(v) == 4

        await until(settled, 120.0)
        rows = store.round_verdicts(rid)
        assert {r["node_key"] for r in rows} == keys, outcome
        assert {r["verdict"] for r in rows} == {"pass"}, (rows, outcome)
        assert all(r["signature"] and r["session_id"] and r["commitment"] for r in rows)
        await until(lambda: not any(p.exists() for p in spools), 30.0)
    store.close()
