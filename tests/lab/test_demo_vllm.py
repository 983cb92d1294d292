"""The README's vLLM demo, end to end: `netcheck demo --profile cpu-tiny-vllm` exits 0.

It runs the coordinator, the shared proxy backend and seven node processes, each with its
own vLLM engine, on this machine's CPU. Before vLLM honoured the profile's cpu_threads,
every process bound one spinning OpenMP thread per core, real compute outlasted the
emulated service time, and all three honest nodes were late in every round.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_vllm_demo_is_green(tmp_path: Path) -> None:
    """Honest nodes pass and every cheater fails every round with the vLLM engine."""
    env = {**os.environ, "NETCHECK_MODEL_CACHE": str(tmp_path / "models"), "COLUMNS": "200"}
    workdir = tmp_path / "demo-run"
    proc = subprocess.run(
        [sys.executable, "-m", "netcheck", "demo", "--profile", "cpu-tiny-vllm",
         "--workdir", str(workdir)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, out[-5000:] + "\n--- stderr tail ---\n" + proc.stderr[-1500:]
    assert "demo OK" in out
    assert out.count("passed as expected") == 3
    assert out.count("caught every round") == 4
