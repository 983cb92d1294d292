"""A node that closes its session after its deadline has passed, without a result, was
already late at the deadline: its verdict is ``missing`` (a capacity strike), not
``disconnected`` (which never counts); before the deadline it is ``missing`` too (the
node had acknowledged its job). Adversarial review, session 12: a farm node that
saw its batch run past the deadline closed the session before sending its late result
and reconnected, turning every ``late`` into a free ``disconnected``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import DeadlineParams
from netcheck.coordinator.rounds import run_round
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import (
    canary_store,
    running_coordinator,
    serve_until_release,
    small_profile,
)
from netcheck.lab.testing import raw_session as hand_session
from netcheck.protocol.messages import ProfileClaim

PROFILE = small_profile(
    "latedrop", dispatch_timeout_s=1.0, result_timeout_s=6.0,
    deadline=DeadlineParams(t_ref_s=0.2, slack_s=0.1),
)  # fmt: skip
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}


async def _round_with_a_cut(tmp_path: Path, after_deadline: bool) -> tuple[str, str]:
    """One round of an honest node and a raw node that acks, receives the release and
    closes its session (no bye) right away or 0.5 s after the job's deadline; the raw
    node's (verdict, reason)."""
    store = canary_store(tmp_path / "n.db", PROFILE, FP, 16, answer=(1, 2, 3, 4))
    identity = Ed25519PrivateKey.generate()
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.start(rc.node(MadeUpWorker(FP, PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1, timeout_s=5.0)
        claim = ProfileClaim(profile=PROFILE.name, fingerprint=FP, software="test")
        http, ws, transport = await hand_session(rc, identity, claim)
        try:
            await rc.wait_connected(2, timeout_s=5.0)
            round_task = asyncio.create_task(run_round(rc.coord, PROFILE.name))
            job, _release = await serve_until_release(ws, transport)
            if after_deadline:
                await asyncio.sleep(job.deadline_s + 0.5)
            await ws.close()
            report = await asyncio.wait_for(round_task, 10.0)
        finally:
            await ws.close()
            await http.close()
    (mine,) = [o for o in report.outcomes if o.node_key == public_key_text(identity)]
    return str(mine.verdict), mine.reason


async def test_closing_the_session_after_the_deadline_is_missing(tmp_path: Path) -> None:
    verdict, reason = await _round_with_a_cut(tmp_path, after_deadline=True)
    assert verdict == "missing", reason
    assert "after the deadline" in reason


async def test_closing_the_session_before_the_deadline_is_missing_too(tmp_path: Path) -> None:
    """Since session 12 any close after the ack without a result is ``missing``
    (tests/coordinator/test_leave_after_ack.py): a node that predicts it will miss
    cannot get a free ``disconnected`` by closing before its deadline either."""
    verdict, reason = await _round_with_a_cut(tmp_path, after_deadline=False)
    assert verdict == "missing", reason
    assert reason.startswith("session closed after acknowledging its job"), reason
