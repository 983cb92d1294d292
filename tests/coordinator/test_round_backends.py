"""Rounds over real loopback sessions on both storage backends (SQLite, PostgreSQL).

Nodes are emulated (:class:`netcheck.lab.load.HashWorker`, deterministic outputs); the
sessions, frames, receipts, planner, verifier and storage are the real ones.
"""

from __future__ import annotations

from pathlib import Path

from netcheck.config import DeadlineParams, Profile
from netcheck.coordinator.rounds import run_round
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.load import FAKE_FINGERPRINT, HashWorker, add_hash_references
from netcheck.lab.testing import running_coordinator
from netcheck.storage import Store

PROFILE = Profile(
    name="load-test",
    engine="torch",
    model="synth:tiny",
    dtype="float32",
    batch_size=6,
    prompt_len=32,
    max_new_tokens=8,
    canaries_min=1,
    canaries_max=2,
    deadline=DeadlineParams(t_ref_s=1.0, slack_s=1.0),
    dispatch_timeout_s=3.0,
    result_timeout_s=5.0,
)


async def test_rounds_on_backend(tmp_path: Path, db_url: str) -> None:
    """Three rounds: honest emulated nodes pass, a made-up node fails, every (round, node)
    is stored once and no canary is spent twice."""
    store = Store(db_url)
    add_hash_references(store, PROFILE, 40)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        honest = [rc.node(HashWorker(PROFILE.max_new_tokens), PROFILE.name) for _ in range(4)]
        cheat = rc.node(MadeUpWorker(FAKE_FINGERPRINT, PROFILE.max_new_tokens), PROFILE.name)
        for c in [*honest, cheat]:
            rc.start(c)
        await rc.wait_connected(5, timeout_s=10.0)
        honest_keys = {public_key_text(c.identity) for c in honest}
        round_ids = []
        for _ in range(3):
            report = await run_round(rc.coord, PROFILE.name)
            round_ids.append(report.round_id)
            got = {o.node_key: str(o.verdict) for o in report.outcomes}
            assert got[public_key_text(cheat.identity)] == "wrong-answer"
            assert {k: got[k] for k in honest_keys} == dict.fromkeys(honest_keys, "pass")
        for rid in round_ids:
            rows = store.round_verdicts(rid)
            assert len(rows) == 5 == len({r["node_key"] for r in rows})
            assert all(r["signature"] for r in rows if r["node_key"] in honest_keys)
        assert {r["status"] for r in store.list_rounds()} == {"complete"}
        used = store.canary_ids_used()
        assert len(used) == len(set(used)) and len(used) >= 15
