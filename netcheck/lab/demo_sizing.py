"""EMULATION sizing for ``netcheck demo``: how long the demo's emulated GPUs take a batch.

The demo runs every node on this machine's CPU and emulates GPU service time
(:mod:`netcheck.lab.emulation`): a result leaves a node at ``max(real compute, emulated
time)``. The emulated time is the profile's ``t_ref_s``, which only works when the honest
nodes' *real* compute fits inside it. On a small or busy host, or with a real model
(``cpu-smollm2``: one batch ~19 CPU-seconds on one core against a ``t_ref_s`` measured
for one batch alone), real compute outlasts it, every honest node is ``late`` (an
``EMULATION OVERRUN``) and the demo shows a false alarm that says nothing about the
method.

So the demo measures, before the nodes start, how long one batch takes while the honest
nodes compute at once on this host, under whatever else runs on it: ``honest`` probe
processes answer batches together (:mod:`netcheck.lab.demo_probe`, torch and factoring
engines); for vLLM, whose engine loads are slow (seven load for the demo already), the
first reference batch is timed alone and scaled by :func:`honest_share` instead. :func:`emulated_batch_time` adds a
margin. When that is slower than the profile's ``t_ref_s``, :func:`write_demo_profile`
writes a copy of the profile into the demo's work folder with ``t_ref_s`` set to the
emulated time; coordinator and nodes find it first by name (``<config folder>/profiles``,
:func:`netcheck.config.profile_search_dirs`), so the deadline and the emulation agree. The
copy says in its header that it is a demo emulation; nothing outside the demo's folder
changes.

Non-goals: this is not calibration (``netcheck engine calibrate`` measures a real card);
the figure only sizes the demo's emulated GPU to the host it runs on.
"""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any

from netcheck.config import DEFAULT_PROFILES_DIR, Profile, load_profile
from netcheck.errors import ConfigError

MARGIN = 4 / 3
"""Emulated time over the honest nodes' expected real compute (scheduling noise, the
coordinator, the low-priority cheaters' leftovers)."""


def host_cores() -> int:
    """CPUs this process may run on (``os.sched_getaffinity``, else ``os.cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def load_average() -> str:
    """The 1-minute load average as text ("n/a" where the OS has none)."""
    load = load_average_value()
    return "n/a" if load is None else f"{load:.2f}"


def host_line(cores: int, load: float | None) -> str:
    """The demo's first line: this host's CPUs and 1-minute load average, and, when the
    load is already at or above the CPU count, that other work competes with the demo's
    node processes: the demo sizes its emulated GPU to that load (slower rounds), and
    honest nodes may still run late if the load rises further (``HOST TOO BUSY``)."""
    text = f"host: {cores} CPUs, load average {'n/a' if load is None else f'{load:.2f}'} (1 min)"
    if load is not None and load >= cores:
        text += (
            ": busy: other work already uses every CPU; the demo times its honest nodes' "
            "batches under this load and emulates a GPU slow enough for it, but if the load "
            "rises further honest nodes may run late (such rounds are re-run, then reported as "
            "HOST TOO BUSY); "
            f"for a quick, clean run start it when `uptime` shows a load average below {cores}"
        )
    return text


def load_average_value() -> float | None:
    """The 1-minute load average (None where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def honest_share(honest: int, cores: int) -> float:
    """How much longer one honest batch takes when ``honest`` node processes compute at
    once on ``cores`` cores (each on one thread) than alone: ``max(1, honest / cores)``.

    Raises:
        ValueError: ``honest`` or ``cores`` < 1.
    """
    if honest < 1 or cores < 1:
        raise ValueError("need honest >= 1 and cores >= 1")
    return max(1.0, honest / cores)


def emulated_batch_time(t_ref_s: float, concurrent_s: float, margin: float = MARGIN) -> float:
    """Seconds the demo's emulated GPU takes per batch: the profile's ``t_ref_s``, or
    ``margin * concurrent_s`` rounded up to 0.5 s when that is longer (``concurrent_s``:
    one honest node's batch while the others compute too, measured on this host,
    :class:`netcheck.lab.demo_probe.Probes`; or modelled,
    ``honest_share(honest, cores) * one batch alone``).

    Raises:
        ValueError: a negative time or ``margin`` < 1.
    """
    if t_ref_s < 0 or concurrent_s < 0 or margin < 1:
        raise ValueError("need t_ref_s >= 0, concurrent_s >= 0 and margin >= 1")
    return max(t_ref_s, math.ceil(margin * concurrent_s * 2) / 2)


def _toml_value(v: Any) -> str:
    if isinstance(v, dict):  # inline table with quoted keys
        return "{ " + ", ".join(f'"{k}" = {_toml_value(x)}' for k, x in v.items()) + " }"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)  # int, float


def profile_source(name_or_path: str) -> Path:
    """The ``.toml`` file of a shipped profile name (``configs/profiles/<name>.toml``) or
    the path itself."""
    if "/" in name_or_path or name_or_path.endswith(".toml"):
        return Path(name_or_path)
    return DEFAULT_PROFILES_DIR / f"{name_or_path}.toml"


RESULT_TIMEOUT_BATCHES = 6
"""The demo copy collects results for at least this many emulated batch times: the proxy
pair's shared GPU takes two, and the low-priority wrong-dtype node's bfloat16 batch on a
CPU costs ~3 float32 batches (``cpu-smollm2``: 53 vs 19 CPU-seconds)."""


def write_demo_profile(name_or_path: str, workdir: Path, batch_time_s: float, why: str) -> Path:
    """Write ``<workdir>/profiles/<name>.toml``: the profile with ``[deadline] t_ref_s =
    batch_time_s`` and ``result_timeout_s`` at least :data:`RESULT_TIMEOUT_BATCHES` x
    ``batch_time_s`` (every other field as shipped), and a header saying it is the demo's
    EMULATION and ``why``. Returns its path.

    Raises:
        ConfigError: the profile is missing, or the copy does not validate or differs
            from it in more than ``t_ref_s``.
    """
    base = load_profile(name_or_path)  # validates the original and gives the name
    data = tomllib.loads(profile_source(name_or_path).read_text())
    data["name"] = base.name
    data.setdefault("deadline", {})["t_ref_s"] = float(batch_time_s)
    timeout = max(base.result_timeout_s, RESULT_TIMEOUT_BATCHES * batch_time_s)
    data["result_timeout_s"] = float(timeout)
    head = [
        f"# EMULATION: written by `netcheck demo` for this run only; profile {base.name!r}",
        f"# as shipped except [deadline] t_ref_s = {batch_time_s:.2f} s (shipped "
        f"{base.deadline.t_ref_s:.2f} s), the demo's emulated GPU,",
        f"# {why}; and result_timeout_s = {timeout:.1f} s (shipped {base.result_timeout_s:.1f}).",
    ]
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items() if k not in tables]
    for table, values in tables.items():
        lines += ["", f"[{table}]", *(f"{k} = {_toml_value(v)}" for k, v in values.items())]
    out = workdir / "profiles" / f"{base.name}.toml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(head + lines) + "\n")
    copy = load_profile(out)
    changed = {"deadline", "result_timeout_s"}
    if copy.model_dump(exclude=changed) != base.model_dump(exclude=changed):
        raise ConfigError(f"demo copy {out} differs from profile {base.name} beyond t_ref_s")
    return out


def describe(profile: Profile, batch_time_s: float, measured: str) -> str:
    """One line for the demo's output: the emulated batch time and where it came from
    (``measured``: what was timed on this host, in words with the figures)."""
    if batch_time_s == profile.deadline.t_ref_s:
        return (
            f"each node's GPU serves a batch in {batch_time_s:.2f} s (profile t_ref_s; {measured})"
        )
    return (
        f"each node's GPU serves a batch in {batch_time_s:.2f} s, not the profile's "
        f"{profile.deadline.t_ref_s:.2f} s: {measured}, so a faster emulated GPU would "
        "time the host, not the method"
    )


def renice_tree(pid: int, nice: int) -> int:
    """Set the nice value of every thread of process ``pid`` and of its descendants
    (Linux ``/proc/<pid>/task/*/children``; elsewhere the process alone), so work already
    running in thread pools is lowered too: on Linux ``setpriority`` acts on one thread.
    Processes or threads that exit meanwhile are skipped. Returns the threads changed.
    """
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        try:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
            return 1
        except OSError:
            return 0
    changed = 0
    for task in tasks.iterdir():
        try:
            os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
            changed += 1
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            changed += renice_tree(int(child), nice)
    return changed
