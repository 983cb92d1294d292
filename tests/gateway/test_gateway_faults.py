"""Faults of a multi-gateway deployment on PostgreSQL (docs/gateways.md, "Faults"):
a gateway process killed mid-round, the leader killed mid-round, a gateway whose clock
is off. Gateways that die are real child processes (``netcheck gateway serve``) killed
with SIGKILL; nodes are EMULATED engines over real sessions."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from gw_support import (
    FAST,
    PROFILE,
    profile_file,
    spawn_gateway,
    until,
    write_gateway_config,
)

from netcheck.admin_client import admin_call
from netcheck.keys import generate_key, public_key_text
from netcheck.lab.gateways import running_gateway
from netcheck.lab.load import HashWorker, add_hash_references
from netcheck.node.client import NodeClient
from netcheck.storage import Store
from netcheck.storage.cluster import ClusterStore


@contextlib.contextmanager
def child(proc: object) -> Iterator[None]:
    try:
        yield
    finally:
        p = proc  # type: ignore[assignment]
        if p.poll() is None:  # type: ignore[attr-defined]
            p.kill()  # type: ignore[attr-defined]
        p.wait(10)  # type: ignore[attr-defined]


def nodes_for(url: str, key: Ed25519PrivateKey, n: int, delay_s: float) -> list[NodeClient]:
    return [
        NodeClient(url, Ed25519PrivateKey.generate(), key.public_key(), PROFILE.name,
                   HashWorker(PROFILE.max_new_tokens, delay_s), label=f"n{i}")
        for i in range(n)
    ]  # fmt: skip


async def open_round(cluster: ClusterStore, state: str) -> str:
    """Wait for a round in ``state``; returns its id."""
    found: list[str] = []

    async def check() -> bool:
        rows = await asyncio.to_thread(cluster.open_rounds)
        found[:] = [r["round_id"] for r in rows if r["state"] == state]
        return bool(found)

    await until(check, 30.0)
    return found[0]


async def test_gateway_killed_mid_round(tmp_path: Path, pg_url: str) -> None:
    """Gateway B is SIGKILLed after the release: its nodes get `disconnected` naming B,
    the leader's nodes pass, and the next round spends only fresh canaries."""
    store = Store(pg_url)
    add_hash_references(store, PROFILE, 60)
    cluster = ClusterStore(store)
    key_path = tmp_path / "coordinator.pem"
    ident = generate_key(key_path)
    prof_path, _ = profile_file(tmp_path)
    cfg_b, port_b, _ = write_gateway_config(tmp_path, pg_url, "gw-b", prof_path, key_path)
    async with running_gateway(tmp_path, pg_url, "gw-a", [PROFILE], ident, **FAST) as a:
        assert a.coord.control.is_leader  # type: ignore[attr-defined]
        proc = spawn_gateway(cfg_b, tmp_path / "gw-b.log")
        with child(proc):
            await until(lambda: "gw-b" in cluster.live_gateways(), 60.0)
            url_b = f"ws://127.0.0.1:{port_b}/v1/ws"
            on_a = nodes_for(a.url, ident, 2, 0.0)
            on_b = nodes_for(url_b, ident, 2, 3.0)  # still computing when B dies
            for c in on_a + on_b:
                a.start(c)
            await until(lambda: len(cluster.connected_nodes()) == 4, 30.0)
            task = asyncio.ensure_future(a.coord.start_round(PROFILE.name))
            round_id = await open_round(cluster, "released")
            await asyncio.sleep(0.5)
            proc.kill()
            report = await asyncio.wait_for(task, 60.0)
        assert report.round_id == round_id and report.status == "complete"
        got = {o.node_key: (str(o.verdict), o.reason) for o in report.outcomes}
        for c in on_a:
            assert got[public_key_text(c.identity)][0] == "pass"
        for c in on_b:
            assert got[public_key_text(c.identity)] == (
                "disconnected",
                "gateway gw-b lost mid-round",
            )
        assert report.phases["cluster"]["lost"] == ["gw-b"]
        spent_1 = set(store.canary_ids_used())
        assert spent_1 == {c for r in store.round_assignments(round_id) for c in r["canary_ids"]}
        # The next round: only A's nodes, fresh canaries.
        await until(lambda: len(cluster.connected_nodes()) == 2, 20.0)
        report2 = await a.coord.start_round(PROFILE.name)
        assert {str(o.verdict) for o in report2.outcomes} == {"pass"}
        assert len(report2.outcomes) == 2
        spent_2 = {c for r in store.round_assignments(report2.round_id) for c in r["canary_ids"]}
        assert spent_2 and not spent_2 & spent_1
    store.close()


async def test_leader_killed_mid_round(tmp_path: Path, pg_url: str) -> None:
    """The leader is SIGKILLed after the release: the other gateway takes over, closes
    the round as aborted (leader lost), no node has two verdicts, and its next round
    completes."""
    store = Store(pg_url)
    add_hash_references(store, PROFILE, 60)
    cluster = ClusterStore(store)
    key_path = tmp_path / "coordinator.pem"
    ident = generate_key(key_path)
    prof_path, _ = profile_file(tmp_path)
    cfg_l, port_l, token = write_gateway_config(tmp_path, pg_url, "gw-l", prof_path, key_path)
    proc = spawn_gateway(cfg_l, tmp_path / "gw-l.log")
    with child(proc):
        await until(lambda: "gw-l" in cluster.live_gateways(), 60.0)
        async with running_gateway(tmp_path, pg_url, "gw-f", [PROFILE], ident, **FAST) as f:
            await asyncio.sleep(0.5)
            assert not f.coord.control.is_leader  # type: ignore[attr-defined]
            on_f = nodes_for(f.url, ident, 2, 2.0)
            on_l = nodes_for(f"ws://127.0.0.1:{port_l}/v1/ws", ident, 1, 2.0)
            for c in on_f + on_l:
                f.start(c)
            await until(lambda: len(cluster.connected_nodes()) == 3, 30.0)
            # `netcheck nodes --config <gateway config>`: every node, with its gateway
            listing = await asyncio.to_thread(admin_call, cfg_l, "GET", "/admin/nodes")
            held = {c["node_key"]: c["gateway_id"] for c in listing["cluster"]}
            assert held == {
                **{public_key_text(c.identity): "gw-f" for c in on_f},
                **{public_key_text(c.identity): "gw-l" for c in on_l},
            }
            assert {c["gateway"] for c in listing["connected"]} == {"gw-l"}

            async def ask_leader() -> None:
                async with aiohttp.ClientSession() as http:
                    await http.post(
                        f"http://127.0.0.1:{port_l}/admin/rounds",
                        json={"profile": PROFILE.name},
                        headers={"Authorization": f"Bearer {token}"},
                    )

            asking = asyncio.ensure_future(ask_leader())
            round_id = await open_round(cluster, "released")
            proc.kill()
            with contextlib.suppress(aiohttp.ClientError):
                await asyncio.wait_for(asking, 10.0)
            await until(lambda: f.coord.control.is_leader, 20.0)  # type: ignore[attr-defined]
            await until(lambda: (cluster.get_round(round_id) or {}).get("state") == "aborted", 20.0)
            assert (cluster.get_round(round_id) or {})["reason"] == "leader lost"
            rounds = {r["round_id"]: r for r in store.list_rounds()}
            assert rounds[round_id]["status"] == "aborted"
            await asyncio.sleep(3.0)  # F's own nodes finish and F records them (once)
            rows = store.round_verdicts(round_id)
            assert len(rows) == len({r["node_key"] for r in rows})
            assert all(r["verdict"] == "pass" for r in rows), rows
            await until(lambda: len(cluster.connected_nodes()) == 2, 20.0)
            report = await f.coord.start_round(PROFILE.name)
            assert report.status == "complete"
            assert {str(o.verdict) for o in report.outcomes} == {"pass"}
            spent = store.canary_ids_used()
            assert len(spent) == len(set(spent))
    store.close()


async def test_gateway_with_wrong_clock_sits_out(tmp_path: Path, pg_url: str) -> None:
    """A gateway whose clock is 500 ms off (bound 250 ms) sits the round out and says
    why; one 4 ms off takes part with its offset measured and recorded."""
    store = Store(pg_url)
    add_hash_references(store, PROFILE, 60)
    ident = Ed25519PrivateKey.generate()

    def skewed(ms: float) -> object:
        return lambda: time.time_ns() + int(ms * 1e6)

    # A loaded test machine can delay a clock sample by tens of ms: the uncertainty
    # bound is wide here so that only the offset decides.
    opts = {**FAST, "max_clock_uncertainty_s": 0.2, "max_clock_offset_s": 0.25}
    async with (
        running_gateway(tmp_path, pg_url, "gw-a", [PROFILE], ident, **opts) as a,
        running_gateway(tmp_path, pg_url, "gw-far", [PROFILE], ident,
                        wall_ns=skewed(500), **opts) as far,  # type: ignore[arg-type]
        running_gateway(tmp_path, pg_url, "gw-near", [PROFILE], ident,
                        wall_ns=skewed(4), **opts) as near,  # type: ignore[arg-type]
    ):  # fmt: skip
        assert a.coord.control.is_leader  # type: ignore[attr-defined]
        keys = {}
        for rc in (a, far, near):
            c = rc.node(HashWorker(PROFILE.max_new_tokens), PROFILE.name)
            rc.start(c)
            keys[rc.coord.gateway_id] = public_key_text(c.identity)  # type: ignore[attr-defined]
            await rc.wait_connected(1)
        report = await a.coord.start_round(PROFILE.name)
        got = {o.node_key: str(o.verdict) for o in report.outcomes}
        assert got == {keys["gw-a"]: "pass", keys["gw-near"]: "pass"}
        rows = {r["gateway_id"]: r for r in ClusterStore(store).round_gateway_rows(report.round_id)}
        assert rows["gw-far"]["status"] == "excluded"
        far_row = rows["gw-far"]
        assert far_row["reason"].startswith("clock offset to the leader -")
        assert "bound max_clock_offset_s = 250.0 ms" in far_row["reason"]
        assert abs(far_row["leader_offset_s"] + 0.5) <= far_row["uncertainty_s"] + 0.001
        near_row = rows["gw-near"]
        assert near_row["status"] == "reported"
        assert abs(near_row["leader_offset_s"] + 0.004) <= near_row["uncertainty_s"] + 0.001
    store.close()


pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")
