"""Fair release (docs/protocol.md "Timing"): a fresh random order each round, and each
node's own write stamps kept."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from netcheck.coordinator.rounds import NodeTiming, _release


class _WS:
    def __init__(self, log: list[str], key: str) -> None:
        self.log, self.key = log, key

    async def send_bytes(self, frame: bytes) -> None:
        self.log.append(self.key)


def _ready(n: int, log: list[str]) -> list[tuple[Any, Any]]:
    out = []
    for i in range(n):
        key = f"node-{i:02d}"
        ws = _WS(log, key)
        session = SimpleNamespace(
            node_key=key,
            label=key,
            send_lock=asyncio.Lock(),
            seal=lambda msg: b"frame",
            gone=lambda: False,
            holds_job=lambda round_id: True,
            ws=ws,
            write_bounded=lambda frame, timeout_s, what, ws=ws: ws.send_bytes(frame),
        )
        out.append((session, SimpleNamespace(job_key=bytes(32))))
    return out


async def test_release_order_is_reshuffled_every_round_and_stamps_are_per_node() -> None:
    """Two rounds over the same 20 nodes write in different orders (1 in 20! to be
    equal by chance); release_index records each node's place; each node's stamps
    bracket its own write, in write order."""
    orders = []
    for _ in range(2):
        log: list[str] = []
        ready = _ready(20, log)
        timing = {s.node_key: NodeTiming() for s, _ in ready}
        await _release("r1", ready, timing)
        assert sorted(log) == sorted(timing) and len(log) == 20
        assert [timing[k].release_index for k in log] == list(range(20))
        starts = [timing[k].release_start_ns for k in log]
        ends = [timing[k].release_end_ns for k in log]
        assert all(
            s is not None and e is not None and s <= e for s, e in zip(starts, ends, strict=True)
        )
        assert starts == sorted(starts)  # type: ignore[type-var]
        budget = timing[log[-1]].budget(starts[0])
        assert budget["release_index"] == 19 and budget["release_offset_s"] >= 0  # type: ignore[operator]
        orders.append(log)
    assert orders[0] != orders[1]
