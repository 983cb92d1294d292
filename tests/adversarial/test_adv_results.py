"""Hostile nodes answering a round more than once (over real loopback websockets).

A node that sends its result twice, or sends a second result after the first was
collected, must not change its verdict, its stored evidence or another node's outcome:
the first result stands, the second closes the session UNEXPECTED_MESSAGE (it is an
order violation, docs/protocol.md §6.2) and the round is stored complete once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from adv_support import FP, profile, raw_session, store_with_canaries, wait_for
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.coordinator.rounds import run_round
from netcheck.errors import CloseCode
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import running_coordinator, serve_until_release
from netcheck.protocol.jobs import commitment, open_job, sign_receipt
from netcheck.protocol.messages import Result


async def test_a_result_sent_twice_keeps_the_first_and_closes_the_session(
    tmp_path: Path,
) -> None:
    prof = profile(result_timeout_s=4.0)
    ident = Ed25519PrivateKey.generate()
    store = store_with_canaries(tmp_path, prof)
    async with running_coordinator(tmp_path, [prof], store=store) as rc:
        rc.start(rc.node(MadeUpWorker(FP, prof.max_new_tokens), prof.name, label="other"))
        http, ws, tr = await raw_session(rc, ident)
        try:
            await rc.wait_connected(2, timeout_s=5.0)
            round_task = asyncio.create_task(run_round(rc.coord, prof.name))
            job, release = await serve_until_release(ws, tr)
            prompts = open_job(job.ciphertext, release.job_key, job.round_id, job.nonce)
            right = tuple(tuple(range(1, prof.max_new_tokens + 1)) for _ in prompts)
            wrong = tuple((7,) * prof.max_new_tokens for _ in prompts)
            for outputs in (right, right, wrong):  # the same twice, then another answer
                digest = commitment(outputs)
                sig = sign_receipt(ident, tr.session_id, job.round_id, digest)
                await ws.send_bytes(tr.seal(Result(job.round_id, outputs, digest, sig)))
            report = await asyncio.wait_for(round_task, 15.0)
            async with asyncio.timeout(5):
                while (await ws.receive()).type not in (
                    aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING
                ):  # fmt: skip
                    pass
            assert ws.close_code == CloseCode.UNEXPECTED_MESSAGE
        finally:
            await http.close()
        me = public_key_text(ident)
        verdicts = {o.node_key: str(o.verdict) for o in report.outcomes}
        assert verdicts[me] == "pass", report.outcomes
        assert len(verdicts) == 2 and "disconnected" not in verdicts.values()
        stored = store.round_verdicts(report.round_id)
        assert sorted(v["node_key"] for v in stored).count(me) == 1
        row = store.result_row(report.round_id, me)
        assert row is not None and row["commitment"] == commitment(right).hex()
        assert store.list_rounds()[0]["status"] == "complete"
        assert await wait_for(lambda: me not in rc.coord.sessions)
