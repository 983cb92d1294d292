"""A full validation round over real loopback websockets with honest and cheating nodes.

Real pieces: the coordinator's aiohttp server, the node clients, the handshake and
encrypted frames, the torch engine on the synthetic tiny model, SQLite storage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from netcheck.config import DeadlineParams, Profile, load_profile
from netcheck.coordinator.rounds import run_round
from netcheck.engines import load_engine
from netcheck.engines.base import Engine
from netcheck.keys import public_key_text
from netcheck.lab.adversary import ClaimingWorker, MadeUpWorker
from netcheck.lab.emulation import EmulatedGPU, EmulatedWorker
from netcheck.lab.testing import running_coordinator
from netcheck.node.client import NodeClient
from netcheck.node.serving import OpenSession
from netcheck.node.workers import EngineWorker
from netcheck.protocol.messages import Job, Message
from netcheck.references.build import build_references
from netcheck.storage import Store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def profile() -> Profile:
    # Five batches share one torch engine in this process (honest-1, honest-2, late,
    # malformed, mismatch), one after the other: at about 0.7 s each on an idle core the
    # last honest one finishes near 3.5 s, so the deadline (t_ref 8 s + 0.5 s slack)
    # leaves room for a loaded machine; "late" emulates 16 s, well past it.
    base = load_profile("cpu-tiny")
    return base.model_copy(
        update={
            "deadline": DeadlineParams(t_ref_s=8.0, a=1.0, b=1.0, p99_s=0.0, slack_s=0.5),
            "dispatch_timeout_s": 2.0,
            "result_timeout_s": 25.0,
        }
    )


@pytest.fixture(scope="module")
def engine(profile: Profile) -> Engine:
    return load_engine(profile)


class ShortOutputs:
    """Returns outputs one token short: the result is malformed."""

    def __init__(self, inner: EngineWorker) -> None:
        self.inner = inner

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return self.inner.fingerprint

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        return [o[:-1] for o in await self.inner.run(prompts)]


class Vanishing:
    """Signals when released; the test then kills the node mid-round."""

    def __init__(self, inner: EngineWorker) -> None:
        self.inner = inner
        self.released = asyncio.Event()

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return self.inner.fingerprint

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        self.released.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


class IgnoresJobs(NodeClient):
    """Never acknowledges a job (the coordinator releases without it)."""

    async def _handle(self, session: OpenSession, msg: Message) -> None:
        if not isinstance(msg, Job):
            await super()._handle(session, msg)


async def test_round_verdicts_for_honest_and_cheating_nodes(
    tmp_path: Path, profile: Profile, engine: Engine
) -> None:
    """Every node gets the verdict its behaviour deserves; canaries are never reused."""
    store = Store(f"sqlite:///{tmp_path / 'netcheck.db'}")
    build_references(profile, engine, store, profile.batch_size * 4)
    honest = EngineWorker(engine)
    fp = honest.fingerprint
    bf16 = load_engine(profile, dtype="bfloat16")
    vanishing = Vanishing(honest)
    workers = {
        "honest-1": honest,
        "honest-2": honest,
        "made-up": MadeUpWorker(fp, profile.max_new_tokens),
        "wrong-dtype": ClaimingWorker(bf16, dict(bf16.fingerprint, dtype=profile.dtype)),
        "late": EmulatedWorker(honest, EmulatedGPU(16.0)),
        "malformed": ShortOutputs(honest),
        "mismatch": ClaimingWorker(engine, dict(fp, model_id="synth:other")),
        "vanishing": vanishing,
    }
    async with running_coordinator(tmp_path, [profile], store=store) as rc:
        clients = {name: rc.node(w, profile.name, label=name) for name, w in workers.items()}
        clients["missing"] = rc.node(honest, profile.name, label="missing", client_cls=IgnoresJobs)
        keys = {}
        tasks = {}
        for name, client in clients.items():
            tasks[name] = rc.start(client)
            keys[public_key_text(client.identity)] = name
        await rc.wait_connected(len(clients))

        async def kill_vanishing() -> None:
            await vanishing.released.wait()
            tasks["vanishing"].cancel()

        killer = asyncio.create_task(kill_vanishing())
        report = await run_round(rc.coord, profile.name)
        killer.cancel()
        got = {keys[o.node_key]: str(o.verdict) for o in report.outcomes}
        why = {keys[o.node_key]: o.reason for o in report.outcomes}
        # killed after its release: it had acknowledged its job (docs/protocol.md §5.8)
        assert why["vanishing"].startswith("session closed after acknowledging its job"), why
        assert got == {
            "honest-1": "pass",
            "honest-2": "pass",
            "made-up": "wrong-answer",
            "wrong-dtype": "wrong-answer",
            "late": "late",
            "malformed": "malformed",
            "mismatch": "profile-mismatch",
            "vanishing": "missing",
            "missing": "missing",
        }, report.as_dict()
        assert report.phases["release_skew_s"] >= 0.0
        first_used = set(store.canary_ids_used())
        assert first_used, "honest nodes were checked against canaries"

        # A second round with the remaining nodes draws fresh canaries only.
        report2 = await run_round(rc.coord, profile.name)
        assert {keys[o.node_key]: str(o.verdict) for o in report2.outcomes}["honest-1"] == "pass"
        used = store.canary_ids_used()
        assert len(used) == len(set(used)), "a canary was used twice"
        assert first_used < set(used)
