"""RTT sample sets taken between rounds (netcheck/coordinator/rtt.py): a round reads the
set the background prober took and sends no echo itself; each set serves one round; a
round samples only the nodes without a usable set, all under one deadline."""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from netcheck.config import DeadlineParams, Profile
from netcheck.coordinator import rtt
from netcheck.coordinator.rounds import run_round
from netcheck.coordinator.rtt import RttProber, RttSet
from netcheck.coordinator.session import NodeSession
from netcheck.engines import probe
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import canary_store, running_coordinator
from netcheck.node.client import NodeClient
from netcheck.protocol.messages import Echo, Message
from netcheck.records import NodeTiming


@dataclass
class FakeSession:
    """Answers echoes and probes after ``delay_s`` (never, when None); counts them."""

    delay_s: float | None = 0.001
    wrong: bool = False
    session_id: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    node_key: str = field(default_factory=lambda: "ed25519:" + secrets.token_hex(8))
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    rtt_s: float | None = None
    echoes: int = 0
    probes: int = 0

    @property
    def label(self) -> str:
        return self.node_key[:16]

    async def measure_rtt(self, nonce: int, timeout_s: float) -> float | None:
        self.echoes += 1
        if self.delay_s is None or self.delay_s > timeout_s:
            await asyncio.sleep(timeout_s)
            return None
        await asyncio.sleep(self.delay_s)
        return self.delay_s

    async def probe_rtt(
        self, nonce: int, challenge: bytes, timeout_s: float
    ) -> tuple[float, bytes] | None:
        self.probes += 1
        if self.delay_s is None or self.delay_s > timeout_s:
            await asyncio.sleep(timeout_s)
            return None
        await asyncio.sleep(self.delay_s)
        return self.delay_s, bytes(32) if self.wrong else probe.answer(challenge)


def _prober(fakes: Sequence[FakeSession], refresh_s: float = 10.0) -> RttProber:
    return RttProber(lambda: cast(list[NodeSession], list(fakes)), refresh_s, random.Random(1))


def _sessions(fakes: Sequence[FakeSession]) -> list[NodeSession]:
    return cast(list[NodeSession], list(fakes))


async def _sample_in_background(p: RttProber, fakes: Sequence[FakeSession]) -> None:
    """Make every fake due now, tick, and wait for the background batch."""
    p.tick()  # registers the sessions
    for f in fakes:
        p._due[f.session_id] = 0
    assert p.tick() == len(fakes)
    await asyncio.gather(*p._batches)


async def test_round_uses_background_set_and_sends_no_echo() -> None:
    """A round fills each node's timing from the set taken before it and sends no
    echo or probe itself (it does not wait on any node)."""
    fakes = [FakeSession(delay_s=0.002 * (i + 1)) for i in range(3)]
    p = _prober(fakes)
    await _sample_in_background(p, fakes)
    assert all(f.echoes == 3 and f.probes == 3 for f in fakes)
    for f in fakes:
        f.delay_s = None  # from now on a node answers nothing
    timing = {f.node_key: NodeTiming() for f in fakes}
    inline = await p.for_round(_sessions(fakes), timing)
    assert inline == 0
    assert all(f.echoes == 3 and f.probes == 3 for f in fakes)  # nothing sent by the round
    for i, f in enumerate(fakes):
        t = timing[f.node_key]
        assert t.echo_samples_s == [0.002 * (i + 1)] * 3 and t.rtt_s == f.rtt_s == 0.002 * (i + 1)
        assert len(t.probe_samples_s) == 3 and t.probe_missed == t.probe_wrong == 0
        assert t.rtt_age_s is not None and t.rtt_age_s >= 0
    assert p.stats.background_sets == 3 and p.stats.used_sets == 3


async def test_a_set_serves_one_round_only() -> None:
    """The next round does not reuse a set: it samples the node again (rounds are
    independent evidence for the relay test)."""
    fakes = [FakeSession()]
    p = _prober(fakes)
    await _sample_in_background(p, fakes)
    await p.for_round(_sessions(fakes), {fakes[0].node_key: NodeTiming()})
    assert p.unused_set(_sessions(fakes)[0]) is None
    t = NodeTiming()
    assert await p.for_round(_sessions(fakes), {fakes[0].node_key: t}) == 1
    assert fakes[0].echoes == 6 and len(t.echo_samples_s) == 3


async def test_old_set_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A set older than max_age_s is replaced by one taken at the round."""
    fakes = [FakeSession()]
    p = _prober(fakes, refresh_s=10.0)
    old = RttSet(time.monotonic_ns() - int(31e9), (0.5,), (), 0, 0)
    p._latest[fakes[0].session_id] = old
    t = NodeTiming()
    assert await p.for_round(_sessions(fakes), {fakes[0].node_key: t}) == 1
    assert t.echo_samples_s == [0.001] * 3 and t.rtt_age_s is not None and t.rtt_age_s < 30


async def test_inline_sampling_ends_by_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Silent nodes sampled at the round cost one deadline (plus the echo in flight) in
    all, not three echo timeouts each; they get no RTT, the others theirs."""
    monkeypatch.setattr(rtt, "INLINE_DEADLINE_S", 0.2)
    monkeypatch.setattr(rtt, "ECHO_TIMEOUT_S", 1.0)
    fakes = [FakeSession(delay_s=None) for _ in range(20)] + [FakeSession()]
    p = _prober(fakes)
    timing = {f.node_key: NodeTiming() for f in fakes}
    async with asyncio.timeout(2.5):  # old schedule: 3 x 1 s
        assert await p.for_round(_sessions(fakes), timing) == 21
    assert all(timing[f.node_key].rtt_s is None for f in fakes[:-1])
    assert all(f.echoes == 1 for f in fakes[:-1])
    assert timing[fakes[-1].node_key].rtt_s == 0.001


async def test_wrong_probe_answers_counted_not_used() -> None:
    """Background sets check probe answers (in one batch): wrong ones are counted."""
    fakes = [FakeSession(wrong=True), FakeSession()]
    p = _prober(fakes)
    await _sample_in_background(p, fakes)
    timing = {f.node_key: NodeTiming() for f in fakes}
    await p.for_round(_sessions(fakes), timing)
    liar, honest = (timing[f.node_key] for f in fakes)
    assert liar.probe_wrong == 3 and liar.probe_samples_s == [] and liar.probe_rtt_s is None
    assert honest.probe_wrong == 0 and len(honest.probe_samples_s) == 3


async def test_no_new_set_while_a_round_holds_the_prober() -> None:
    """No set starts while a round runs; a set in flight when a round starts is waited
    for if the node has none, and discarded if it has one (it would overlap the job)."""
    fakes = [FakeSession(delay_s=0.05), FakeSession(delay_s=0.05)]
    p = _prober(fakes)
    await _sample_in_background(p, fakes[:1])  # only the first has a set
    for f in fakes:
        p._due[f.session_id] = 0
    assert p.tick() == 2  # both in flight now
    timing = {f.node_key: NodeTiming() for f in fakes}
    with p.holding():
        assert p.tick() == 0
        assert await p.for_round(_sessions(fakes), timing) == 0
        await asyncio.gather(*p._batches)
        assert p.tick() == 0
    assert all(len(timing[f.node_key].echo_samples_s) == 3 for f in fakes)
    assert p.unused_set(_sessions(fakes)[0]) is None  # the overlapping refresh: dropped
    assert p.stats.discarded_sets == 1


async def test_background_sets_spread_and_replace_used_ones() -> None:
    """New sessions are sampled in the background; after a round, the used sets are
    replaced without waiting for the next round."""
    fakes = [FakeSession() for _ in range(5)]
    p = _prober(fakes, refresh_s=0.4)  # used sets replaced within 0.1 s
    stop = asyncio.Event()
    runner = asyncio.create_task(p.run(stop))
    try:
        async with asyncio.timeout(5.0):
            while any(p.unused_set(s) is None for s in _sessions(fakes)):
                await asyncio.sleep(0.02)
            with p.holding():
                await p.for_round(_sessions(fakes), {f.node_key: NodeTiming() for f in fakes})
            while any(p.unused_set(s) is None for s in _sessions(fakes)):
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        await runner
    assert p.stats.inline_sets == 0 and p.stats.background_sets >= 10


# -- end to end ---------------------------------------------------------------------

T = 4
PROFILE = Profile(
    name="rtt", engine="torch", model="synth:tiny", dtype="float32", batch_size=4,
    prompt_len=16, max_new_tokens=T, canaries_min=1, canaries_max=1,
    deadline=DeadlineParams(t_ref_s=1.0), dispatch_timeout_s=5.0, result_timeout_s=5.0,
)  # fmt: skip
FP: dict[str, str | int] = {"engine": "fake", "weight_hash": "22" * 32}
SLOW = {"echo_s": 0.0}


class SlowEchoes(NodeClient):
    """Answers echoes after ``SLOW["echo_s"]`` seconds (set by the test)."""

    async def _handle(self, session: Any, msg: Message) -> None:
        if isinstance(msg, Echo) and SLOW["echo_s"]:
            await asyncio.sleep(SLOW["echo_s"])
        await super()._handle(session, msg)


async def test_round_plans_from_sets_taken_before_it(tmp_path: Path) -> None:
    """Real sessions: once the prober has a set of every node, nodes that answer echoes
    only after 3 s are still planned at once with their earlier RTT (stored with its
    age); the round sent them no echo."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FP, 40, answer=(1,) * T)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.coord.rtt.refresh_s = 1.0
        keys = rc.start_named(
            {f"n{i}": MadeUpWorker(FP, T) for i in range(3)}, PROFILE.name, client_cls=SlowEchoes
        )
        await rc.wait_connected(3)
        async with asyncio.timeout(10.0):
            while any(rc.coord.rtt.unused_set(s) is None for s in rc.coord.connected()):
                await asyncio.sleep(0.05)
        SLOW["echo_s"] = 3.0
        try:
            report = await run_round(rc.coord, PROFILE.name)
        finally:
            SLOW["echo_s"] = 0.0
        assert report.phases["plan_sampling_s"] < rtt.ECHO_TIMEOUT_S  # no echo waited on
        for key in keys.values():
            row = store.result_row(report.round_id, key)
            assert row is not None and row["rtt_s"] is not None and row["rtt_s"] < 1.0
            assert len(row["extra"]["echo_samples_s"]) == 3
            assert row["extra"]["rtt_age_s"] > 0
