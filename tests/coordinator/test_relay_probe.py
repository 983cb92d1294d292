"""The compute probe end to end over real loopback websockets (docs/protocol.md §5.9,
docs/detection.md "Relay test"): raw probe and echo samples are stored per round, a node
whose probes take an extra ~30 ms hop (a worker that sleeps, or a real proxy to a shared
backend with an injected delay) gets a ``relay`` flag after enough rounds, a direct node
does not; a node that ignores probes gets a ``pending`` relay flag."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from netcheck.analysis.screening import RELAY_MIN_ROUNDS
from netcheck.config import DeadlineParams, Profile
from netcheck.coordinator import rtt
from netcheck.coordinator.rounds import run_round
from netcheck.engines import probe
from netcheck.keys import parse_public_key, public_key_bytes
from netcheck.lab.adversary import MadeUpWorker, ProxyWorker
from netcheck.lab.backend import make_backend_app
from netcheck.lab.testing import RunningCoordinator, canary_store, running_coordinator
from netcheck.node.client import NodeClient
from netcheck.protocol.jobs import verify_receipt
from netcheck.protocol.messages import Message, Probe
from netcheck.storage import Store

T = 4
HOP_S = 0.03  # the relay's extra leg
PROFILE = Profile(
    name="relay", engine="torch", model="synth:tiny", dtype="float32", batch_size=4,
    prompt_len=16, max_new_tokens=T, canaries_min=1, canaries_max=1,
    deadline=DeadlineParams(t_ref_s=1.0), dispatch_timeout_s=5.0, result_timeout_s=5.0,
)  # fmt: skip
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "11" * 32}


class SlowProbe(MadeUpWorker):
    """Answers correctly, but only after an extra hop of ``HOP_S`` (a relayed GPU)."""

    async def probe(self, challenge: bytes) -> bytes:
        await asyncio.sleep(HOP_S)
        return probe.answer(challenge)


class WrongProbe(MadeUpWorker):
    """Answers probes at once with a made-up answer (a relay faking the device)."""

    async def probe(self, challenge: bytes) -> bytes:
        return bytes(32)


class IgnoresProbes(NodeClient):
    """A node process that answers echoes but drops every probe."""

    async def _handle(self, session: Any, msg: Message) -> None:
        if not isinstance(msg, Probe):
            await super()._handle(session, msg)


def _store(tmp_path: Path, n: int = 400) -> Store:
    return canary_store(tmp_path / "netcheck.db", PROFILE, FP, n, answer=(1,) * T)


@contextlib.asynccontextmanager
async def _backend(delay_s: float) -> AsyncIterator[str]:
    """A shared backend (netcheck.lab.backend) on loopback, ``delay_s`` per request."""
    runner = web.AppRunner(make_backend_app(MadeUpWorker(FP, T), delay_s=delay_s))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _relay_flags(rc: RunningCoordinator) -> list[dict[str, Any]]:
    flags = rc.coord.screening.flags
    return [g.as_dict() for f in flags.list_flags(kind="relay")
            if (g := flags.get_flag(f.flag_id)) is not None]  # fmt: skip


async def test_relayed_probes_flagged_direct_node_not(tmp_path: Path) -> None:
    """+30 ms on the probe path (sleeping worker; real proxy through the backend with an
    injected delay) gives a confirmed relay flag after RELAY_MIN_ROUNDS rounds, once;
    the direct node is never flagged; raw samples are in the results rows."""
    async with (
        _backend(HOP_S) as backend_url,
        running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc,
    ):
        keys = rc.start_named(
            {
                "direct": MadeUpWorker(FP, T),
                "slow": SlowProbe(FP, T),
                "proxy": ProxyWorker(backend_url, FP),
            },
            PROFILE.name,
        )
        await rc.wait_connected(3)
        reports = [await run_round(rc.coord, PROFILE.name) for _ in range(RELAY_MIN_ROUNDS + 1)]
        # the made-up answers also raise answer-failure flags; count the relay ones here
        relay_ids = {int(f["flag_id"]) for f in _relay_flags(rc)}
        per_round = [[f for f in r.flags if f in relay_ids] for r in reports]
        assert per_round[: RELAY_MIN_ROUNDS - 1] == [[]] * (RELAY_MIN_ROUNDS - 1)
        assert len(per_round[RELAY_MIN_ROUNDS - 1]) == 2
        assert per_round[RELAY_MIN_ROUNDS] == []  # the same rounds are already covered

        flags = _relay_flags(rc)
        flagged = sorted(k for f in flags for k in f["node_keys"])
        assert flagged == sorted([keys["slow"], keys["proxy"]])
        for f in flags:
            assert f["status"] == "confirmed"
            ev = f["evidence"]
            assert f["statistic"] > f["threshold"] >= ev["floor_s"] == 0.015
            assert f["statistic"] >= HOP_S - PROFILE.probe_ref_s - 0.005  # the hop, less ref
            assert len(ev["probe_rtts_s"]) == len(ev["echo_rtts_s"]) == RELAY_MIN_ROUNDS
            assert ev["probe_ref_s"] == PROFILE.probe_ref_s == 0.005
            node = f["node_keys"][0]
            raw = rc.coord.store.result_row(ev["rounds"][0], node)
            assert raw is not None and len(raw["extra"]["probe_samples_s"]) == 3
            assert len(ev["receipts"]) == RELAY_MIN_ROUNDS
            for r in ev["receipts"]:
                assert verify_receipt(
                    _raw_key(node), bytes.fromhex(r["signature"]),
                    bytes.fromhex(r["session_id"]), r["round_id"], bytes.fromhex(r["commitment"]),
                )  # fmt: skip

        # The direct node: raw samples stored, probe about as fast as the echo.
        row = rc.coord.store.result_row(reports[-1].round_id, keys["direct"])
        assert row is not None
        extra = row["extra"]
        assert len(extra["echo_samples_s"]) == 3 and len(extra["probe_samples_s"]) == 3
        assert extra["probe_missed"] == extra["probe_wrong"] == 0
        assert extra["probe_rtt_s"] == min(extra["probe_samples_s"])
        assert row["rtt_s"] == min(extra["echo_samples_s"])
        # Less than one relay hop over the echo (the flag floor, 15 ms, is applied over
        # RELAY_MIN_ROUNDS rounds; one round on a loaded CI machine gets a hop's room).
        assert extra["probe_rtt_s"] - row["rtt_s"] < HOP_S


async def test_node_ignoring_or_faking_probes_gets_pending_relay_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Echoes answered but probes dropped (or answered wrongly) in RELAY_MIN_ROUNDS
    rounds: a ``pending`` relay flag; wrong answers are counted, never used as RTTs."""
    monkeypatch.setattr(rtt, "PROBE_TIMEOUT_S", 0.2)
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        silent = rc.start_named(
            {"silent": MadeUpWorker(FP, T)}, PROFILE.name, client_cls=IgnoresProbes
        )
        liar = rc.start_named({"liar": WrongProbe(FP, T)}, PROFILE.name)
        await rc.wait_connected(2)
        reports = [await run_round(rc.coord, PROFILE.name) for _ in range(RELAY_MIN_ROUNDS)]
        row = rc.coord.store.result_row(reports[0].round_id, silent["silent"])
        assert row is not None
        assert row["extra"]["probe_missed"] == 1  # one timeout, then no more probes
        assert row["extra"]["probe_samples_s"] == [] and row["rtt_s"] is not None
        row = rc.coord.store.result_row(reports[0].round_id, liar["liar"])
        assert row is not None
        assert row["extra"]["probe_wrong"] == 3 and row["extra"]["probe_samples_s"] == []
        flags = _relay_flags(rc)
        assert sorted(k for f in flags for k in f["node_keys"]) == sorted(
            [silent["silent"], liar["liar"]]
        )
        assert {f["status"] for f in flags} == {"pending"}
        assert all(len(f["evidence"]["unanswered_rounds"]) == RELAY_MIN_ROUNDS for f in flags)


def _raw_key(text: str) -> bytes:
    return public_key_bytes(parse_public_key(text))


async def test_backend_probe_route_and_proxy_forwarding() -> None:
    """POST /probe on the shared backend runs the probe; a ProxyWorker forwards to it;
    bad challenges are 400."""
    async with _backend(0.0) as url:
        answer = await ProxyWorker(url, FP).probe(bytes(range(32)))
        assert answer == probe.answer(bytes(range(32)))
        async with aiohttp.ClientSession() as http:
            for bad in ({"challenge": "zz"}, {"challenge": "00" * 31}, {}, [1]):
                async with http.post(url + "/probe", json=bad) as resp:
                    assert resp.status == 400
