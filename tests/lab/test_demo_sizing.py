"""netcheck.lab.demo_sizing: the demo's emulated GPU is never faster than this host."""

from __future__ import annotations

from pathlib import Path

import pytest

from netcheck.config import load_node_config, load_profile
from netcheck.lab.demo import write_configs
from netcheck.lab.demo_sizing import (
    describe,
    emulated_batch_time,
    honest_share,
    write_demo_profile,
)


def test_honest_share_counts_processes_per_core() -> None:
    """Three one-thread honest nodes on two cores take 1.5x a lone batch; never < 1."""
    assert honest_share(3, 2) == 1.5
    assert honest_share(3, 8) == 1.0
    with pytest.raises(ValueError):
        honest_share(0, 2)


def test_profile_t_ref_kept_when_the_host_is_fast_enough() -> None:
    """cpu-tiny on a quiet 2-core host (0.6 s a batch with 3 at once) keeps its 2 s GPU."""
    assert emulated_batch_time(2.0, 0.6) == 2.0


def test_slow_host_gets_a_slower_emulated_gpu() -> None:
    """cpu-smollm2 (28.5 s a batch with 3 at once on 2 cores): 4/3 x 28.5 = 38 s, not 20 s."""
    assert emulated_batch_time(20.0, 28.5) == 38.0
    assert emulated_batch_time(2.0, 2.4) == 3.5  # 3.2 rounded up to 0.5
    with pytest.raises(ValueError):
        emulated_batch_time(2.0, 1.0, margin=0.9)


def test_demo_profile_copy_changes_only_t_ref(tmp_path: Path) -> None:
    """The copy differs from the shipped profile in t_ref_s and the result timeout only,
    and says it is emulation."""
    shipped = load_profile("cpu-smollm2")
    path = write_demo_profile("cpu-smollm2", tmp_path, 38.0, "sized to this host")
    assert path == tmp_path / "profiles" / "cpu-smollm2.toml"
    copy = load_profile(path)
    assert copy.deadline.t_ref_s == 38.0
    assert copy.result_timeout_s == shipped.result_timeout_s == 300.0  # already > 6 x 38 s
    slow = load_profile(write_demo_profile("cpu-smollm2", tmp_path, 60.0, "slow host"))
    assert slow.result_timeout_s == 6 * 60.0  # proxies (2 batch times) and bf16 still fit
    assert copy.deadline_s(0.0) > shipped.deadline_s(0.0)
    changed = {"deadline", "result_timeout_s"}
    assert copy.model_dump(exclude=changed) == shipped.model_dump(exclude=changed)
    assert copy.deadline.model_dump(exclude={"t_ref_s"}) == shipped.deadline.model_dump(
        exclude={"t_ref_s"}
    )
    assert path.read_text().startswith("# EMULATION: written by `netcheck demo`")


def test_demo_nodes_and_coordinator_find_the_copy_by_name(tmp_path: Path) -> None:
    """Configs written by the demo resolve the profile name to the copy in the work folder,
    so deadline (coordinator) and emulation (nodes) agree."""
    write_configs(tmp_path, "cpu-tiny", ["honest-1"])
    write_demo_profile("cpu-tiny", tmp_path, 3.5, "test")
    node = load_node_config(tmp_path / "honest-1.toml")
    assert node.load_profile(node.profile).deadline.t_ref_s == 3.5


def test_describe_says_why_the_gpu_is_slower() -> None:
    """The demo's EMULATION line names both times and what was measured when it departs
    from the profile."""
    profile = load_profile("cpu-smollm2")
    text = describe(profile, 38.0, "3 batches computed at once took 28.50 s")
    assert "38.00 s" in text and "20.00 s" in text and "28.50 s" in text
    assert "profile t_ref_s" in describe(profile, 20.0, "3 at once 5.00 s")


def _nice_of(tid: int) -> int:
    return int(Path(f"/proc/{tid}/stat").read_text().rsplit(")", 1)[1].split()[16])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_renice_tree_lowers_threads_and_children() -> None:
    """Every thread of the process and of its child is reniced: on Linux setpriority
    on a pid changes one thread, and an engine computes in pool threads."""
    import subprocess
    import sys
    import time

    from netcheck.lab.demo_sizing import renice_tree

    code = (
        "import subprocess, sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print('ready', flush=True); time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        assert renice_tree(proc.pid, 7) >= 3  # main thread, sleeper thread, child
        tasks = [int(t.name) for t in Path(f"/proc/{proc.pid}/task").iterdir()]
        children = [
            int(c)
            for t in tasks
            for c in Path(f"/proc/{proc.pid}/task/{t}/children").read_text().split()
        ]
        assert len(tasks) >= 2 and len(children) == 1
        assert {_nice_of(t) for t in tasks} == {7}
        assert _nice_of(children[0]) == 7
    finally:
        for c in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
            subprocess.run(["kill", c], check=False)
        proc.kill()
        proc.wait()


def test_host_line_warns_when_the_host_is_already_busy() -> None:
    """At a load average at or above the CPU count the first line says honest nodes may
    run late (FALSE ALARM) and when to run it instead; below it, only the figures."""
    from netcheck.lab.demo_sizing import host_line

    assert host_line(2, 0.5) == "host: 2 CPUs, load average 0.50 (1 min)"
    assert host_line(2, None) == "host: 2 CPUs, load average n/a (1 min)"
    busy = host_line(2, 3.87)
    assert busy.startswith("host: 2 CPUs, load average 3.87 (1 min): busy")
    assert "HOST TOO BUSY" in busy and "load average below 2" in busy
    assert "times its honest nodes' batches under this load" in busy
