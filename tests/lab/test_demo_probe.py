"""netcheck.lab.demo_probe: the demo's emulated GPU is sized from batches that several
processes computed at once on this host, not from one batch scaled by the core count."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from netcheck.config import load_profile
from netcheck.lab.demo import size_emulation
from netcheck.lab.demo_probe import ProbeResult, Probes, concurrent_batch_time, overlapped


def test_probes_compute_at_once_in_separate_processes(tmp_path: Path) -> None:
    """Each probe is its own process with its own engine, and all their batches run inside
    one common window: the figure is what honest nodes computing together see."""
    results = Probes("cpu-tiny", 2, tmp_path / "logs", batches=1).run()
    assert len(results) == 2
    assert len({r.pid for r in results}) == 2 and os.getpid() not in {r.pid for r in results}
    assert overlapped(results)
    assert all(len(r.batch_s) == 1 and r.batch_s[0] > 0 for r in results)
    assert concurrent_batch_time(results) == max(r.batch_s[0] for r in results)
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["probe-0.log", "probe-1.log"]


def test_a_probe_that_fails_names_itself_and_its_log(tmp_path: Path) -> None:
    """A probe that cannot start (unknown profile) is an error carrying its log's tail."""
    with pytest.raises(RuntimeError, match="no-such-profile"):
        Probes("no-such-profile", 1, tmp_path).run(timeout_s=120)


def test_concurrent_time_is_the_slowest_probes_last_batch() -> None:
    """The first batch carries one-time costs; the slowest process sets the figure."""
    a = ProbeResult(pid=1, start_s=0.0, end_s=3.0, batch_s=(2.0, 1.0))
    b = ProbeResult(pid=2, start_s=0.5, end_s=3.5, batch_s=(1.5, 1.4))
    assert concurrent_batch_time([a, b]) == 1.4
    assert overlapped([a, b])
    assert not overlapped([a, ProbeResult(pid=3, start_s=3.1, end_s=4.0, batch_s=(0.9,))])
    with pytest.raises(ValueError):
        concurrent_batch_time([])


def test_the_demo_sizes_from_the_measurement_not_the_core_count() -> None:
    """Given a concurrent figure, the emulated GPU (hence the deadline) follows it whatever
    the core count: beside other sessions, a host's 64 cores may give the demo one. Without
    one (vLLM), one batch alone is scaled by honest / cores."""
    profile = load_profile("cpu-tiny")  # t_ref_s 2.0
    for cores in (2, 64):
        batch_time, measured = size_emulation(profile, 3, cores, 0.4, 3.0)
        assert batch_time == 4.0  # 4/3 x 3.0
        assert "3 batches computed at once took 3.00 s" in measured
    assert size_emulation(profile, 3, 64, 0.4, None)[0] == 2.0  # modelled: 0.4 x 1 x 4/3
    assert size_emulation(profile, 3, 2, 2.0, None)[0] == 4.0  # modelled: 2.0 x 1.5 x 4/3
