"""A node that acknowledged its job and then reports an ``error`` for it (the state table
allows ``error`` in JOB_PENDING, docs/protocol.md §6.2) while the release loop is waiting
for a session's send lock is ``missing`` (the node's own error report, a capacity
strike), never ``coordinator-error``. Adversarial review, session 13: the error took the
round back to OPEN on that session, sealing the release then failed as the
coordinator's own protocol error, and ``coordinator-error`` (never a strike, blames
nobody) won over the node's error report."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import DeadlineParams
from netcheck.coordinator import rounds
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import (
    canary_store,
    raw_session,
    running_coordinator,
    serve_until_job,
    small_profile,
)
from netcheck.protocol.messages import Ack, Error, ProfileClaim

PROFILE = small_profile(
    "errrel", dispatch_timeout_s=2.0, result_timeout_s=4.0,
    deadline=DeadlineParams(t_ref_s=0.2, slack_s=0.1),
)  # fmt: skip
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}
CLAIM = ProfileClaim(profile=PROFILE.name, fingerprint=FP, software="test")


async def test_an_error_after_the_ack_while_the_release_waits_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = canary_store(tmp_path / "n.db", PROFILE, FP, 24, answer=(1, 2, 3, 4))
    identity = Ed25519PrivateKey.generate()
    key = public_key_text(identity)
    releasing, reported = asyncio.Event(), asyncio.Event()
    release = rounds._release

    async def waiting_release(round_id: str, *args: Any, **kwargs: Any) -> None:
        # Stands for the loop waiting on a send lock another write holds (it takes every
        # ready session's lock before sealing): the node's error is read meanwhile.
        releasing.set()
        await asyncio.wait_for(reported.wait(), 5.0)
        await release(round_id, *args, **kwargs)

    monkeypatch.setattr(rounds, "_release", waiting_release)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.start(rc.node(MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1, timeout_s=5.0)
        http, ws, transport = await raw_session(rc, identity, CLAIM)
        try:
            await rc.wait_connected(2, timeout_s=5.0)
            round_task = asyncio.create_task(rounds.run_round(rc.coord, PROFILE.name))
            job = await serve_until_job(ws, transport)
            await ws.send_bytes(transport.seal(Ack(job.round_id)))
            await asyncio.wait_for(releasing.wait(), 5.0)
            await ws.send_bytes(transport.seal(Error(job.round_id, "out of memory")))
            s = rc.coord.sessions[key]
            for _ in range(200):  # until the coordinator has read it
                if s.protocol.job_state(job.round_id) != "job_pending":
                    break
                await asyncio.sleep(0.01)
            reported.set()
            report = await asyncio.wait_for(round_task, 10.0)
        finally:
            await ws.close()
            await http.close()
    got = {o.node_key: (str(o.verdict), o.reason) for o in report.outcomes}
    verdict, reason = got.pop(key)
    assert verdict == "missing", reason
    assert reason == "node reported error: out of memory"
    assert all(v != "coordinator-error" for v, _ in got.values()), got
