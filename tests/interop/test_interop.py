"""A node written from docs/protocol.md alone (foreign_node.py) completes handshake, echo,
probe, job, result, receipt and verdict notice against the real coordinator, and its
receipts verify with ``netcheck receipt verify``."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from foreign_node import ForeignNode, raw_key

from netcheck.lab.testing import canary_store, running_coordinator, small_profile

PROFILE = small_profile("interop", dispatch_timeout_s=5.0, result_timeout_s=10.0)
#: the fingerprint claim (docs/protocol.md §2.4), as a node of this profile sends it
FINGERPRINT: dict[str, str | int] = {
    "engine": "torch",
    "engine_version": "torch 2.13.0+cpu",
    "model_id": "synth:tiny",
    "weight_hash": "ab" * 32,
    "dtype": "float32",
    "device": "cpu",
    "cpu_threads": 1,
    "batch_size": PROFILE.batch_size,
    "prompt_len": PROFILE.prompt_len,
    "max_new_tokens": PROFILE.max_new_tokens,
    "decoding": "greedy",
}
ANSWER = [7, 1, 3, 2]  # every canary's expected tokens (the store below)


def key_text(key: Ed25519PrivateKey) -> str:
    """§1.2 text form of a public key."""
    raw = raw_key(key.public_key())
    return "ed25519:" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def engine(prompts: list[str], max_new_tokens: int) -> list[list[int]]:
    """Stands in for a model: the canary answer for every row (the test's references)."""
    assert max_new_tokens == len(ANSWER)
    return [list(ANSWER) for _ in prompts]


async def wait_for(cond: object, timeout_s: float = 20.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not cond():  # type: ignore[operator]
            await asyncio.sleep(0.02)


async def test_foreign_node_completes_a_round_and_its_receipt_verifies(tmp_path: Path) -> None:
    """Handshake, key updates both ways, echo, probe (answers right), job, result, signed
    verdict notice `pass`; the receipt verifies offline, from its values and from the
    coordinator's database."""
    db = tmp_path / "netcheck.db"
    store = canary_store(db, PROFILE, FINGERPRINT, 8, answer=ANSWER)
    identity = Ed25519PrivateKey.generate()
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        node = ForeignNode(
            rc.url,
            raw_key(rc.identity.public_key()),
            identity,
            {"profile": PROFILE.name, "fingerprint": FINGERPRINT, "software": "interop/1"},
            engine,
        )
        task = asyncio.create_task(node.run())
        await asyncio.wait_for(node.session.opened.wait(), 10)
        await rc.wait_connected(1)
        # Make the coordinator's next frame a key update (§3.5), without importing it.
        (coord_session,) = rc.coord.sessions.values()
        coord_session.transport.request_key_update()
        token = rc.coord.config.admin_token
        async with aiohttp.ClientSession() as http:
            resp = await http.post(
                f"http://127.0.0.1:{rc.port}/admin/rounds",
                json={"profile": PROFILE.name},
                headers={"Authorization": f"Bearer {token}"},
            )
            report = await resp.json()
            assert resp.status == 200, report
            resp = await http.get(
                f"http://127.0.0.1:{rc.port}/admin/rounds/{report['round_id']}",
                headers={"Authorization": f"Bearer {token}"},
            )
            stored = await resp.json()
        (verdict,) = report["verdicts"]
        assert verdict["verdict"] == "pass", verdict
        (row,) = stored["verdicts"]
        extra = row["extra"]  # the coordinator checked our probe answers (§5.9)
        assert extra["probe_samples_s"] and extra["probe_wrong"] == 0, extra
        assert extra["echo_samples_s"], extra
        await wait_for(lambda: node.session.verdicts)
        await node.stop()
        await asyncio.wait_for(task, 10)
    s = node.session
    assert s.probes >= 1 and s.echoes >= 1  # echo and relay probes before a round
    assert s.key_updates == (1, 1)  # one each way, both accepted
    assert s.jobs == [report["round_id"]]
    (notice,) = s.verdicts  # signature checked by the node (§5.11)
    assert (notice["round_id"], notice["verdict"]) == (report["round_id"], "pass")
    (receipt,) = s.receipts
    cli = [sys.executable, "-m", "netcheck", "receipt", "verify"]
    who = ["--node-key", key_text(identity), "--round-id", receipt.round_id]
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(receipt.outputs))
    by_hand = [
        "--session-id", receipt.session_id.hex(), "--commitment", receipt.commitment.hex(),
        "--signature", receipt.signature.hex(), "--outputs-json", str(outputs),
    ]  # fmt: skip
    for args in (by_hand, ["--from-db", f"sqlite:///{db}"]):
        done = subprocess.run(cli + who + args, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "valid" in done.stdout
    forged = bytes([receipt.signature[0] ^ 1]) + receipt.signature[1:]
    args = by_hand[:5] + [forged.hex()] + by_hand[6:]
    done = subprocess.run(cli + who + args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout  # the check can fail
