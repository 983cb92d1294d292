"""The demo on the real model: `netcheck demo --profile cpu-smollm2` shows every verdict.

One round (the full three take several minutes on two cores): seven node processes,
five of them loading SmolLM2-135M, on this machine's CPU. Before the demo sized its
emulated GPU to the host, every honest node overran the profile's 20 s ``t_ref_s``
(234-243 s after release at load ~9: FALSE ALARM x 3) and the wrong-dtype node's
bfloat16 batch missed the 300 s result timeout (``missing``, not ``wrong-answer``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

EXPECTED = {
    "honest-1": ("honest", "pass", "passed as expected"),
    "honest-2": ("honest", "pass", "passed as expected"),
    "honest-3": ("honest", "pass", "passed as expected"),
    "made-up": ("cheater (made-up)", "wrong-answer", "caught every round"),
    "wrong-dtype": ("cheater (wrong-dtype)", "wrong-answer", "caught every round"),
    "proxy-a": ("cheater (proxy)", "late", "caught every round"),
    "proxy-b": ("cheater (proxy)", "late", "caught every round"),
}


def summary_rows(out: str) -> dict[str, list[str]]:
    """The demo summary table's rows (node -> cells), told apart from the round tables by
    their role column."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("│┃").split("│")]
        if len(cells) >= 4 and (cells[1] == "honest" or cells[1].startswith("cheater")):
            rows[cells[0]] = cells
    return rows


def test_summary_rows_parse_the_demo_table() -> None:
    """The parser finds the summary rows and skips a round table's row."""
    out = (
        "│ honest-1    │ pass         │ 12.0      │ 7/7      │                │\n"
        "│ honest-1    │ honest                │ pass         │ passed as expected │\n"
    )
    assert summary_rows(out) == {"honest-1": ["honest-1", "honest", "pass", "passed as expected"]}


def test_real_model_demo_shows_every_verdict(tmp_path: Path) -> None:
    """Honest nodes pass; made-up and wrong-dtype are wrong-answer; the proxy pair is late."""
    env = {**os.environ, "NETCHECK_MODEL_CACHE": str(tmp_path / "models"), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "netcheck", "demo", "--profile", "cpu-smollm2", "--rounds", "1",
         "--workdir", str(tmp_path / "demo-run")],
        env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    out = proc.stdout
    why = out[-6000:] + "\n--- stderr tail ---\n" + proc.stderr[-1500:]
    assert proc.returncode == 0, why
    assert "demo OK" in out and "EMULATION" in out, why
    rows = summary_rows(out)
    assert set(rows) == set(EXPECTED), why
    for name, (role, verdict, outcome) in EXPECTED.items():
        assert rows[name] == [name, role, verdict, outcome], (name, why)
