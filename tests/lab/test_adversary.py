"""``netcheck.lab.adversary``: the jitter adversary (its time factor and the hold it adds),
the padding adversary (a fixed hold, or to just before the job's deadline, read through
``JobDeadlineClient``) and the selective farm (``SharedBackend``, ``SelectiveWorker``)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.errors import EngineError
from netcheck.lab.adversary import (
    JOB_DEADLINE_S,
    JitterWorker,
    JobDeadlineClient,
    PaddingWorker,
    SelectiveWorker,
    SharedBackend,
)
from netcheck.protocol.messages import Job, Result


class Sleeper:
    """A worker that computes for ``s`` seconds."""

    fingerprint = {"engine": "test"}

    def __init__(self, s: float) -> None:
        self.s = s

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        await asyncio.sleep(self.s)
        return [[1] for _ in prompts]


def test_factors_are_the_simulators_half_normal_jitter() -> None:
    w = JitterWorker(Sleeper(0.0), log_sd=0.3, seed=7)
    logs = [math.log(w.factor()) / 0.3 for _ in range(4000)]  # |z|
    assert min(logs) >= 0.0
    mean = sum(logs) / len(logs)
    assert abs(mean - math.sqrt(2 / math.pi)) < 0.05  # E|z| = sqrt(2/pi)
    a, b = (JitterWorker(Sleeper(0.0), log_sd=0.3, seed=7) for _ in range(2))
    assert [a.factor() for _ in range(3)] == [b.factor() for _ in range(3)]  # seeded


def test_the_answer_is_held_back_by_its_factor_of_the_compute_time() -> None:
    w = JitterWorker(Sleeper(0.2), log_sd=0.3, seed=3)
    expected = JitterWorker(Sleeper(0.2), log_sd=0.3, seed=3).factor()
    t = time.monotonic()
    out = asyncio.run(w.run(["a", "b"]))
    took = time.monotonic() - t
    assert out == [[1], [1]] and w.fingerprint == {"engine": "test"}
    assert took >= 0.2 * expected - 0.01  # never earlier than its factor allows
    assert expected > 1.0


def test_negative_log_sd_is_refused() -> None:
    with pytest.raises(ValueError, match="log_sd"):
        JitterWorker(Sleeper(0.0), log_sd=-0.1)


# -- padding ------------------------------------------------------------------------------


def _timed(coro: object) -> tuple[list[list[int]], float]:
    t = time.monotonic()
    out = asyncio.run(coro)  # type: ignore[arg-type]
    return out, time.monotonic() - t


def test_a_fixed_hold_holds_every_answer_to_it() -> None:
    # the behaviour of tests/lab/sim/test_sim_vs_live.py's padding pair
    w = PaddingWorker(Sleeper(0.02), 0.25)
    out, took = _timed(w.run(["a"]))
    assert out == [[1]] and 0.25 <= took < 0.4
    assert w.target_s() == 0.25


def test_hold_to_deadline_uses_the_jobs_deadline_less_the_safety() -> None:
    w = PaddingWorker(Sleeper(0.02), deadline_s=5.0)  # fallback, not used inside a job

    async def in_job(deadline_s: float) -> tuple[float, float]:
        JOB_DEADLINE_S.set(deadline_s)
        t = time.monotonic()
        await w.run(["a"])
        return w.target_s(), time.monotonic() - t

    target, took = asyncio.run(in_job(0.5))
    assert target == pytest.approx(0.4)  # 0.5 - max(5% of 0.5, 0.1 s)
    assert 0.4 <= took < 0.5  # just inside the deadline, never past it
    target, _ = asyncio.run(in_job(4.0))
    assert target == pytest.approx(3.8)  # 4.0 - max(5% of 4.0, 0.1 s)
    assert w.target_s() == pytest.approx(4.75)  # outside a job: the fallback deadline


def test_hold_to_deadline_never_holds_a_late_answer_further() -> None:
    # co-loaded: the compute alone is past the target; the answer leaves when computed
    w = PaddingWorker(Sleeper(0.3), deadline_s=0.2, safety_s=0.0)
    assert w.target_s() == pytest.approx(0.19)
    _, took = _timed(w.run(["a"]))
    assert 0.3 <= took < 0.38


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "hold_s or deadline_s"),
        ({"hold_s": -1.0}, "hold_s"),
        ({"deadline_s": 0.0}, "deadline_s"),
        ({"deadline_s": 1.0, "safety_frac": 1.0}, "safety_frac"),
        ({"deadline_s": 1.0, "safety_s": -0.1}, "safety_s"),
    ],
)
def test_bad_padding_settings_are_refused(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        PaddingWorker(Sleeper(0.0), **kwargs)  # type: ignore[arg-type]


class DeadlineSpy:
    """A worker that records the job deadline its batch ran under."""

    fingerprint = {"engine": "test"}

    def __init__(self) -> None:
        self.seen: list[float | None] = []

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        self.seen.append(JOB_DEADLINE_S.get())
        return [[1] for _ in prompts]


class FakeSession:
    """What ``_run_job`` needs of an open session: a session id and ``send``."""

    class transport:  # noqa: N801
        session_id = bytes(16)

    def __init__(self) -> None:
        self.sent: list[object] = []

    async def send(self, msg: object) -> None:
        self.sent.append(msg)


def test_the_job_deadline_client_tells_its_worker_the_jobs_deadline() -> None:
    spy = DeadlineSpy()
    key = Ed25519PrivateKey.generate()
    url = "ws://127.0.0.1:1/v1/ws"
    client = JobDeadlineClient(url, key, key.public_key(), "cpu-tiny", spy)  # type: ignore[arg-type]
    job = Job(round_id="r1", nonce=bytes(12), ciphertext=bytes(16), batch_size=2,
              max_new_tokens=1, deadline_s=3.25)  # fmt: skip
    session = FakeSession()

    async def go() -> float | None:
        await client._run_job(session, job, ["a", "b"])  # type: ignore[arg-type]
        return JOB_DEADLINE_S.get()

    after = asyncio.run(go())
    assert spy.seen == [3.25]  # the job's own deadline, inside its task
    assert after is None  # reset once the job is done
    assert [type(m) for m in session.sent] == [Result]


# -- selective farm ----------------------------------------------------------------------


class Counting(Sleeper):
    """A Sleeper that counts the batches it ran."""

    def __init__(self, s: float) -> None:
        super().__init__(s)
        self.batches = 0

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        self.batches += 1
        return await super().run(prompts)


def test_the_surplus_identity_gives_up_while_the_other_is_busy() -> None:
    backend = SharedBackend(Counting(0.3))
    a = backend.identity("A")
    b = SelectiveWorker(backend, "B", settle_s=0.05)

    async def co_loaded(b_first: bool) -> tuple[object, object]:
        first, second = (b, a) if b_first else (a, b)
        t1 = asyncio.create_task(first.run(["x"]))
        await asyncio.sleep(0.01)  # the other release comes a little later
        t2 = asyncio.create_task(second.run(["y"]))
        r = await asyncio.gather(t1, t2, return_exceptions=True)
        return (r[1], r[0]) if b_first else (r[0], r[1])

    for b_first in (False, True):
        ra, rb = asyncio.run(co_loaded(b_first))
        assert ra == [[1]]
        assert isinstance(rb, EngineError) and "given up" in str(rb)
    assert (b.given_up, b.answered) == (2, 0)
    assert backend.inner.batches == 2  # only A's batches loaded the card
    assert backend.busy() == []


def test_the_surplus_identity_answers_honestly_alone() -> None:
    backend = SharedBackend(Counting(0.05))
    b = SelectiveWorker(backend, "B", settle_s=0.05)
    out, took = _timed(b.run(["x", "y"]))
    assert out == [[1], [1]] and took >= 0.1  # settle + compute
    assert (b.given_up, b.answered) == (0, 1)
    assert b.fingerprint == {"engine": "test"}


def test_busy_is_cleared_when_the_backend_fails() -> None:
    class Failing:
        fingerprint = {"engine": "test"}

        async def run(self, prompts: Sequence[str]) -> list[list[int]]:
            raise EngineError("boom")

    backend = SharedBackend(Failing())
    with pytest.raises(EngineError, match="boom"):
        asyncio.run(backend.identity("A").run(["x"]))
    assert backend.busy() == []


def test_negative_settle_is_refused() -> None:
    with pytest.raises(ValueError, match="settle_s"):
        SelectiveWorker(SharedBackend(Sleeper(0.0)), "B", settle_s=-1.0)
