"""One round across several gateways sharing PostgreSQL (docs/gateways.md), end to end:
real sessions, real frames, the real planner, verifier and storage; EMULATED engines
(netcheck.load.HashWorker)."""

from __future__ import annotations

import time
from pathlib import Path

from aiohttp import WSMsgType
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from gw_support import FAST, PROFILE, leader_of, until

from netcheck.coordinator.assembly import LiveView
from netcheck.keys import public_key_text
from netcheck.lab.gateways import running_gateway
from netcheck.lab.load import FAKE_FINGERPRINT, HashWorker, add_hash_references
from netcheck.lab.testing import raw_session
from netcheck.protocol.messages import ProfileClaim
from netcheck.storage import Store
from netcheck.storage.cluster import ClusterStore
from netcheck.web.metrics import metrics_text


async def test_round_spans_two_gateways(tmp_path: Path, pg_url: str) -> None:
    """Nodes on two gateways get one round: one leader plans, both release, every node
    has exactly one pass verdict, stamps are on the cluster clock and each node's
    gateway is recorded; a second round spends fresh canaries."""
    store = Store(pg_url)
    add_hash_references(store, PROFILE, 60)
    ident = Ed25519PrivateKey.generate()
    async with (
        running_gateway(tmp_path, pg_url, "gw-a", [PROFILE], ident, **FAST) as a,
        running_gateway(tmp_path, pg_url, "gw-b", [PROFILE], ident, **FAST) as b,
    ):
        keys = {}
        for rc, n in ((a, 3), (b, 2)):
            for _ in range(n):
                c = rc.node(HashWorker(PROFILE.max_new_tokens), PROFILE.name)
                rc.start(c)
                keys[public_key_text(c.identity)] = rc.coord.gateway_id  # type: ignore[attr-defined]
        await a.wait_connected(3)
        await b.wait_connected(2)
        leader = await leader_of(a, b)
        assert sum(g.coord.control.is_leader for g in (a, b)) == 1  # type: ignore[attr-defined]
        before = time.time_ns()
        reports = [await leader.coord.start_round(PROFILE.name) for _ in range(2)]
        for report in reports:
            assert report.status == "complete"
            assert {o.node_key: str(o.verdict) for o in report.outcomes} == dict.fromkeys(
                keys, "pass"
            )
            assert report.phases["cluster"]["reported"] == 2
            assert 0 <= report.phases["release_skew_s"] < 1.0
            rows = store.round_verdicts(report.round_id)
            assert len(rows) == len(keys) == len({r["node_key"] for r in rows})
            for r in rows:  # cluster clock: Unix ns of the database clock, not monotonic
                assert r["released_ns"] > before and r["arrived_ns"] >= r["released_ns"]
            cluster = ClusterStore(store)
            assert cluster.round_gateway_of(report.round_id) == keys
            assert cluster.get_round(report.round_id)["state"] == "closed"  # type: ignore[index]
        used = store.canary_ids_used()
        assert len(used) == len(set(used)) >= 10
        held = await a.coord.held_by()
        assert held is not None
        assert {k: r["gateway_id"] for k, r in held.items()} == keys
        for rc, n in ((a, 3), (b, 2)):  # Prometheus series per gateway
            text = metrics_text(LiveView(rc.coord)).decode()
            gid = rc.coord.gateway_id  # type: ignore[attr-defined]
            assert (
                f'netcheck_gateway_nodes{{gateway="{gid}",profile="{PROFILE.name}"}} {n}.0' in text
            )
            assert f'netcheck_gateway_rounds_total{{gateway="{gid}",part="reported"}} 2.0' in text
            assert f'netcheck_gateway_leader{{gateway="{gid}"}}' in text
            assert f'netcheck_gateway_clock_offset_seconds{{gateway="{gid}"}}' in text
    store.close()


async def test_same_key_on_two_gateways_keeps_one_session(tmp_path: Path, pg_url: str) -> None:
    """A node key connecting to a second gateway supersedes its session on the first:
    the first closes with 4015 SUPERSEDED and the shared row names the second."""
    ident = Ed25519PrivateKey.generate()
    node = Ed25519PrivateKey.generate()
    claim = ProfileClaim(profile=PROFILE.name, fingerprint=FAKE_FINGERPRINT, software="t")
    async with (
        running_gateway(tmp_path, pg_url, "gw-a", [PROFILE], ident, **FAST) as a,
        running_gateway(tmp_path, pg_url, "gw-b", [PROFILE], ident, **FAST) as b,
    ):
        http_a, ws_a, _ = await raw_session(a, node, claim)
        http_b = None
        try:
            await a.wait_connected(1)
            http_b, ws_b, _ = await raw_session(b, node, claim)
            await b.wait_connected(1)
            msg = await ws_a.receive(timeout=10.0)
            assert (msg.type, msg.data, msg.extra) == (WSMsgType.CLOSE, 4015, "superseded")
            await until(lambda: not a.coord.sessions)
            cluster = ClusterStore(a.coord.store)
            owner = cluster.session_owners([public_key_text(node)])[public_key_text(node)]
            assert owner == ("gw-b", b.coord.sessions[public_key_text(node)].session_id.hex())
            assert not ws_b.closed
            held = await b.coord.held_by()
            assert held is not None and held[public_key_text(node)]["gateway_id"] == "gw-b"
        finally:
            await http_a.close()
            if http_b is not None:
                await http_b.close()
