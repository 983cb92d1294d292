"""Tests for netcheck.workloads.reservoir.DecoyReservoir (decoys generated ahead)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from netcheck.workloads import LlmWorkload
from netcheck.workloads.reservoir import DecoyReservoir, default_workers

#: 200-character prompts: several sentences each, so a natural repeat is out of reach
LONG = LlmWorkload(200)


@pytest.fixture
def pooled() -> Iterator[DecoyReservoir]:
    reservoir = DecoyReservoir(workers=1, chunk=50)
    yield reservoir
    reservoir.close()


def test_without_workers_take_generates_fresh_inputs_and_refill_does_nothing() -> None:
    """workers=0: ``take`` generates in the caller; nothing is generated ahead."""
    reservoir = DecoyReservoir(workers=0, chunk=7)
    reservoir.refill(LONG, 100)
    assert reservoir.pending(LONG) == 0
    got = reservoir.take(LONG, 20)
    assert len(got) == 20 and all(len(p) == 200 for p in got)
    assert len(set(got)) == 20


def test_refilled_chunks_are_taken_once_and_the_rest_is_kept(pooled: DecoyReservoir) -> None:
    """Chunks generated ahead are handed out once; the rest of a split chunk stays."""
    pooled.refill(LONG, 120)  # chunks of 50, 50, 20
    assert pooled.pending(LONG) == 120
    deadline = time.monotonic() + 60
    while pooled.ready(LONG) < 120 and time.monotonic() < deadline:
        time.sleep(0.01)  # the worker generates them in the background
    assert pooled.ready(LONG) == 120
    first = pooled.take(LONG, 70)
    assert pooled.pending(LONG) == 50  # 30 left of the 2nd chunk + the 20 chunk
    second = pooled.take(LONG, 80)  # the 50 pending + 30 generated now
    assert len(first) == 70 and len(second) == 80
    assert not set(first) & set(second)
    assert pooled.pending(LONG) == 0


def test_top_up_asks_only_for_the_shortfall(pooled: DecoyReservoir) -> None:
    """``top_up(target)`` leaves at least ``target`` pending, without over-asking."""
    pooled.top_up(LONG, 60)
    pooled.top_up(LONG, 60)
    assert pooled.pending(LONG) == 60
    pooled.take(LONG, 45)
    pooled.top_up(LONG, 60)
    assert pooled.pending(LONG) == 60  # 15 left + a chunk of the 45 missing


def test_every_chunk_is_a_fresh_secret_stream() -> None:
    """Two reservoirs (two coordinators, or a restart) never hand out the same decoys."""
    a, b = DecoyReservoir(workers=0), DecoyReservoir(workers=0)
    assert not set(a.take(LONG, 50)) & set(b.take(LONG, 50))


def test_workloads_are_kept_apart(pooled: DecoyReservoir) -> None:
    """Decoys of one profile's workload never serve another's (different lengths)."""
    short = LlmWorkload(40)
    pooled.refill(LONG, 50)
    assert all(len(p) == 40 for p in pooled.take(short, 10))
    assert pooled.pending(LONG) == 50


def test_closed_reservoir_still_serves_inline(pooled: DecoyReservoir) -> None:
    """After ``close`` (coordinator shutdown) a late plan still gets decoys."""
    pooled.refill(LONG, 50)
    pooled.close()
    pooled.close()
    assert pooled.pending(LONG) == 0
    assert len(pooled.take(LONG, 5)) == 5


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="workers >= 0"):
        DecoyReservoir(workers=-1)
    with pytest.raises(ValueError, match="chunk >= 1"):
        DecoyReservoir(workers=0, chunk=0)
    assert 0 <= default_workers() <= 8
