"""200 EMULATED nodes answer at the same instant with H200-sized results; the
coordinator's measured latencies agree with the ground truth (the nodes' own write
stamps on the machine's shared monotonic clock) within the bound that
``scripts/bench_timing.py`` reports (docs/scaling.md, "Timing accuracy")."""

from __future__ import annotations

import asyncio
import statistics
import sys
from pathlib import Path

import pytest

from netcheck.lab.loadrun import LoadRun
from netcheck.lab.timed_nodes import STAMP_P50_BOUND_MS, STAMP_P99_BOUND_MS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from bench_timing import coordinator_stamps, profile_overrides, read_stamps  # noqa: E402

pytestmark = pytest.mark.slow

NODES = 200
ROUNDS = 3


async def test_latencies_of_200_simultaneous_answers_agree_with_ground_truth(
    tmp_path: Path,
) -> None:
    """Per round: stamp error = coordinator arrival stamp - node write start, for all
    200 nodes. The best of three rounds must have p50 and p99 within the bounds (one
    round may be hit by another process taking the CPU on a loaded machine). Before
    the fix the stamps were spread by the decoding of every result ahead in the burst
    (~0.7 ms each on a quiet machine), so p99 was tens to hundreds of ms and this fails."""
    import argparse

    from bench_timing import start_timed_hosts

    args = argparse.Namespace(service=3.0, spread=0.0, mode="instant")
    with LoadRun(tmp_path, None, profile_overrides("h200")) as run:
        run.add_references(run.profile.canaries_max * NODES * (ROUNDS + 1) + 10, vocab=128256)
        run.start_coordinator()
        await run.wait_connected(0, timeout_s=60)
        ready = start_timed_hosts(run, NODES, 128256, args)
        for _ in range(1200):
            if all(p.exists() for p in ready):
                break
            await asyncio.sleep(0.1)
        await run.wait_connected(NODES, timeout_s=120)
        summaries = []
        for _ in range(ROUNDS):
            rep = await run.run_round()
            assert all(v["verdict"] == "pass" for v in rep["verdicts"]), rep["verdicts"][:2]
            coord = coordinator_stamps(run, rep["round_id"])
            await asyncio.sleep(0.5)
            nodes = read_stamps(tmp_path, rep["round_id"])
            errs = sorted(
                (arrived - nodes[k]["send_start_ns"]) / 1e6
                for k, (_, arrived) in coord.items()
                if k in nodes
            )
            assert len(errs) == NODES
            assert errs[0] > 0  # causality: nothing is stamped before it was written
            # ... nor before its last byte left the node's kernel (transmit stamp)
            path = [
                (arrived - nodes[k]["tx_snd_ns"]) / 1e6
                for k, (_, arrived) in coord.items()
                if nodes.get(k, {}).get("tx_snd_ns") is not None
            ]
            assert path and min(path) >= -0.01, path[:5]
            summaries.append((statistics.median(errs), errs[int(0.99 * (NODES - 1))]))
            if summaries[-1][0] <= STAMP_P50_BOUND_MS and summaries[-1][1] <= STAMP_P99_BOUND_MS:
                return
    pytest.fail(
        f"stamp error (p50, p99) ms per round {summaries}; bounds "
        f"{STAMP_P50_BOUND_MS}, {STAMP_P99_BOUND_MS}"
    )
