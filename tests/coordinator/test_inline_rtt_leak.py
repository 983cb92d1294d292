"""The echoes a round sends at its start, to nodes with no usable RTT set, must not tell a
node whether it is loaded. Adversarial review, session 13: only loaded nodes were
sampled inline, so a node that leaves the background prober's echoes unanswered (it need
only answer the keepalive's, one every 20 s) got an echo at the start of exactly the
rounds that load it, seconds before its job; a farm controller seeing two identities
loaded could close one then: gone before dispatch, ``disconnected`` (no strike, not
loaded), the free exit session 12 closed at the job."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import DeadlineParams
from netcheck.coordinator.rounds import run_round
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import canary_store, raw_session, running_coordinator, small_profile
from netcheck.protocol.messages import Echo, Job, ProfileClaim
from netcheck.protocol.transport import Transport

PROFILE = small_profile(
    "inline", dispatch_timeout_s=2.0, result_timeout_s=3.0,
    deadline=DeadlineParams(t_ref_s=0.2, slack_s=0.1),
)  # fmt: skip
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}
CLAIM = ProfileClaim(profile=PROFILE.name, fingerprint=FP, software="test")


async def _listen(
    ws: aiohttp.ClientWebSocketResponse, transport: Transport, seen: list[str]
) -> None:
    """A node that answers no echo (so it never has a usable RTT set) and records what
    arrives."""
    async for msg in ws:
        opened = transport.open(msg.data)
        seen.append(type(opened).__name__)
        if isinstance(opened, Job):
            return


async def test_round_start_echoes_do_not_depend_on_the_load_bit(tmp_path: Path) -> None:
    store = canary_store(tmp_path / "n.db", PROFILE, FP, 24, answer=(1, 2, 3, 4))
    identity = Ed25519PrivateKey.generate()
    key = public_key_text(identity)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        honest = rc.node(MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name)
        rc.start(honest)
        await rc.wait_connected(1, timeout_s=5.0)
        (other,) = rc.coord.sessions
        http, ws, transport = await raw_session(rc, identity, CLAIM)
        try:
            await rc.wait_connected(2, timeout_s=5.0)
            seen: dict[str, list[str]] = {}
            for name, load in (("unloaded", {other}), ("loaded", {other, key})):
                got: list[str] = []
                listener = asyncio.create_task(_listen(ws, transport, got))
                await asyncio.sleep(0.2)  # nothing pending before the round
                got.clear()
                await run_round(rc.coord, PROFILE.name, load=load)
                await asyncio.sleep(0.2)
                listener.cancel()
                seen[name] = [m for m in got if m != "Job"]
        finally:
            await ws.close()
            await http.close()
    # what arrived before any job is the same whether the node was loaded or not
    assert Echo.__name__ in seen["unloaded"], seen
    assert seen["unloaded"][:1] == seen["loaded"][:1], seen
