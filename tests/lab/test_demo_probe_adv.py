"""Demo probes that hang or send garbage (netcheck.lab.demo_probe.Probes.run): a clear
RuntimeError (the demo prints it as ``demo failed: ...``), never a hang or a traceback,
and no probe process left behind."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from netcheck.lab.demo_probe import MARK, Probes


def _fake(tmp_path: Path, scripts: list[str]) -> Probes:
    """Probes whose processes run ``scripts`` (Python source) instead of an engine."""
    probes = Probes.__new__(Probes)
    probes.paths = [tmp_path / f"probe-{i}.log" for i in range(len(scripts))]
    probes.procs = [
        subprocess.Popen([sys.executable, "-c", src], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for src in scripts
    ]  # fmt: skip
    return probes


READY = (
    f"import json,os,sys,time; print({MARK!r} + json.dumps({{'ready': os.getpid()}}), flush=True)"
)


def test_a_probe_hanging_while_it_loads_is_a_timeout_naming_the_logs(tmp_path: Path) -> None:
    probes = _fake(tmp_path, [READY, "import time; time.sleep(600)"])
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="took longer than 1 s .*loading the engine"):
        probes.run(timeout_s=1.0)
    assert time.monotonic() - t0 < 30
    assert all(p.poll() is not None for p in probes.procs)  # none left behind


@pytest.mark.parametrize("report", ["not json", '{"pid": 1}', "[1, 2]"])
def test_a_probe_sending_a_bad_report_is_a_runtime_error(tmp_path: Path, report: str) -> None:
    src = READY + f"; sys.stdin.readline(); print({MARK!r} + {report!r}, flush=True)"
    probes = _fake(tmp_path, [src])
    with pytest.raises(RuntimeError, match="bad report"):
        probes.run(timeout_s=30.0)
    assert all(p.poll() is not None for p in probes.procs)
