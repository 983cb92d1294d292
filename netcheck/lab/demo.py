"""``netcheck demo``: a real coordinator and real node processes on loopback.

What runs (each a separate OS process, talking over real signed websocket sessions):

- the coordinator (``netcheck coordinator serve``);
- three honest nodes (``netcheck node run``);
- ``wrong-dtype``: runs the model in bfloat16 but claims the profile's float32;
- ``made-up``: returns random tokens of the right shape;
- ``proxy-a`` and ``proxy-b``: two identities forwarding their batches to one shared
  backend process (one emulated GPU).

Every node process shares this machine's CPU, so GPU service time is **EMULATED**
(:mod:`netcheck.lab.emulation`): real inference, then each result is held until the
profile's ``t_ref_s`` has passed on the node's own emulated GPU. The shared backend has
one emulated GPU for both proxies (processor sharing, beta = 1), so the pair needs
``2 * t_ref_s`` and misses the deadline ``a * t_ref_s + 2 rtt + slack``.

The demo builds references first (trusted machine = this one), runs the rounds through
the coordinator's admin API, prints the verdicts and exits 0 when every honest node
passed every round and every cheater failed every round.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text

from netcheck.admin_client import AdminError, admin_request, invoked_as
from netcheck.capacity import capacity_status
from netcheck.config import CoordinatorConfig, Profile, load_coordinator_config, load_profile
from netcheck.keys import generate_key, public_key_text
from netcheck.lab.demo_probe import Probes, concurrent_batch_time
from netcheck.lab.demo_refs import DemoReferences
from netcheck.lab.demo_report import (
    HOST_BUSY,
    overrun_counts,
    report_overruns,
    starved_nodes,
    summarize,
    void_line,
)
from netcheck.lab.demo_sizing import (
    describe,
    emulated_batch_time,
    honest_share,
    host_cores,
    host_line,
    load_average,
    load_average_value,
    renice_tree,
    write_demo_profile,
)
from netcheck.report import console as report_console
from netcheck.report import print_round

console = report_console()


@dataclass(frozen=True)
class DemoNode:
    """One node identity in the demo and the behaviour it plays."""

    name: str
    adversary: str | None  # None = honest

    @property
    def role(self) -> str:
        return "honest" if self.adversary is None else f"cheater ({self.adversary})"


NODES = (
    DemoNode("honest-1", None),
    DemoNode("honest-2", None),
    DemoNode("honest-3", None),
    DemoNode("wrong-dtype", "wrong-dtype"),
    DemoNode("made-up", "made-up"),
    DemoNode("proxy-a", "proxy"),
    DemoNode("proxy-b", "proxy"),
)


def free_port() -> int:
    """An unused TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _toml_value(v: Any) -> str:
    if isinstance(v, dict):  # TOML inline table with quoted keys
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    # JSON string/array/number/bool literals are valid TOML values for what we write.
    return json.dumps(v)


def _toml(values: dict[str, Any]) -> str:
    return "".join(f"{k} = {_toml_value(v)}\n" for k, v in values.items())


def demo_nodes(profile_name: str) -> tuple[DemoNode, ...]:
    """The demo's nodes for a profile: the dtype cheater only makes sense for LLMs."""
    if load_profile(profile_name).workload == "llm":
        return NODES
    return tuple(n for n in NODES if n.adversary != "wrong-dtype")


def write_configs(
    workdir: Path, profile_name: str, node_names: Sequence[str]
) -> tuple[Path, dict[str, str]]:
    """Keys and config files for a loopback coordinator and nodes ``node_names``
    (``<workdir>/<name>.toml``, keys in ``<workdir>/keys``); used by the demo and by
    ``scripts/bench_round.py``.

    Returns the coordinator config path and a map node key → node name.
    """
    keys = workdir / "keys"
    coord_key = generate_key(keys / "coordinator.pem")
    names: dict[str, str] = {}
    for name in node_names:
        names[public_key_text(generate_key(keys / f"{name}.pem"))] = name
    port = free_port()
    coord_cfg = workdir / "coordinator.toml"
    coord_cfg.write_text(
        "# Written by netcheck.lab.demo.write_configs.\n"
        + _toml(
            {
                "host": "127.0.0.1",
                "port": port,
                "identity_key": "keys/coordinator.pem",
                "allowed_nodes": list(names),
                "node_names": names,
                "database": "sqlite:///netcheck.db",
                "admin_token": secrets.token_urlsafe(24),
                "profiles": [profile_name],
            }
        )
    )
    for name in node_names:
        (workdir / f"{name}.toml").write_text(
            "# Written by netcheck.lab.demo.write_configs.\n"
            + _toml(
                {
                    "coordinator_url": f"ws://127.0.0.1:{port}/v1/ws",
                    "coordinator_key": public_key_text(coord_key),
                    "identity_key": f"keys/{name}.pem",
                    "profile": profile_name,
                    "name": name,
                }
            )
        )
    return coord_cfg, names


def build_demo_references(cfg: CoordinatorConfig, profile_name: str, count: int) -> None:
    """Answer ``count`` prompts on this machine (the trusted side) into the database."""
    from netcheck.progress import progress_bar

    profile = load_profile(profile_name)
    with console.status("loading the reference engine (synthesizes the model if needed)"):
        refs = DemoReferences(cfg, profile)
    try:
        with progress_bar("building reference answers", total=count) as advance:
            refs.rest(count, refs.threads(host_cores()), lambda n: advance(n, count))
    finally:
        refs.close()


class Processes:
    """The demo's child processes; all are terminated on exit."""

    def __init__(self, workdir: Path) -> None:
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "netcheck", *args], stdout=log, stderr=subprocess.STDOUT
        )

    def renice(self, names: Sequence[str], nice: int) -> None:
        """Lower the CPU priority of processes ``names`` (all threads and children)."""
        for name in names:
            renice_tree(self.procs[name].pid, nice)

    def check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited with status {p.returncode}:\n{tail}")

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 10
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()


async def wait_connected(
    cfg: CoordinatorConfig, procs: Processes, n: int, timeout_s: float
) -> None:
    """Poll the admin API until ``n`` nodes are connected."""
    deadline = time.monotonic() + timeout_s
    connected = 0
    while time.monotonic() < deadline:
        procs.check_alive()
        try:
            connected = (await admin_request(cfg, "GET", "/admin/status"))["connected"]
        except AdminError:
            connected = 0
        if connected >= n:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"only {connected}/{n} nodes connected after {timeout_s:.0f} s")


SCREEN_ROUNDS = 16
"""Screening rounds that :func:`serve_hints` suggests (12 screening + 4 full-load: enough
for the demo's proxy pair, whose shared GPU doubles its service time)."""


def serve_hints(
    coord_path: Path, profile: Profile, nodes: int, program: str | None = None
) -> list[str]:
    """The operator commands to try against a ``--serve`` demo, each with the demo's own
    config: the screening run needs canaries beyond the demo's rounds (``SCREEN_ROUNDS``
    plus as many confirmation rounds, every node drawing ``canaries_max``) and, on a
    profile whose capacity is not measured (``cpu-tiny``), ``--override-capacity``.
    ``program``: the command to show (default :func:`invoked_as`: ``.venv/bin/netcheck``
    when the demo was started that way, as the README does)."""
    prog = invoked_as() if program is None else program
    shown = Path(os.path.relpath(coord_path)) if coord_path.is_absolute() else coord_path
    if shown.parts[:1] == ("..",):
        shown = coord_path
    cfg = f"--config {shlex.quote(str(shown))}"
    count = 2 * SCREEN_ROUNDS * nodes * profile.canaries_max
    override = ""
    if not capacity_status(profile).safe:
        override = ' --override-capacity "demo: emulated GPUs"'
    return [
        "operator commands for this coordinator, from another shell:",
        f"  {prog} nodes {cfg}",
        f"  {prog} round run {cfg}",
        f"  {prog} reference build --profile {profile.name} --count {count} {cfg}"
        "   # canaries for the screening run",
        f"  {prog} screen run {cfg} --rounds {SCREEN_ROUNDS}{override}"
        "   # should flag proxy-a + proxy-b (docs/detection.md)",
        f"  {prog} flags list {cfg}   # then: {prog} flags show {cfg} ID",
    ]


async def _serve_until_interrupted(
    cfg: CoordinatorConfig, coord_path: Path, profile: Profile, nodes: int
) -> None:
    url = f"http://127.0.0.1:{cfg.port}/dashboard/nodes?token={cfg.admin_token}"
    for line in serve_hints(coord_path, profile, nodes):
        console.print(Text(line))
    console.print(
        f"dashboard: [bold]{url}[/bold]\ncoordinator and nodes keep running; Ctrl-C stops"
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


STARVED_RERUNS = 2
"""Rounds the demo re-runs, in all, because an honest node failed on time after its real
compute outlasted the emulated GPU (:func:`netcheck.lab.demo_report.starved_nodes`): the
host's load rose after the demo sized its emulation. References are built for them."""

CHEATER_NICE = 10
"""CPU priority, once every node has joined, of the demo's cheaters that compute (the
wrong-dtype node, the proxy pair's farm backend): on one shared CPU their real compute
must not slow the honest nodes, whose timing the emulated GPUs stand for. Verdicts do not
depend on it: wrong answers are wrong at any speed, and the proxy pair's emulated shared
GPU alone makes it late. Set after joining, not at start: a low-priority engine load
under other load took over 300 s (the made-up and proxy nodes gave up waiting for it)."""
CHEATERS_THAT_COMPUTE = ("backend", "wrong-dtype")


async def _start_nodes(
    workdir: Path, nodes: Sequence[DemoNode], profile_arg: str, batch_time: float,
    procs: Processes,
) -> None:  # fmt: skip
    backend_port = free_port()
    procs.start(
        "backend", "node", "backend", "--profile", profile_arg, "--port", str(backend_port),
        "--emulate-batch-time", str(batch_time), "--beta", "1.0",
    )  # fmt: skip
    await asyncio.sleep(0.5)
    backend_url = f"http://127.0.0.1:{backend_port}"
    for n in nodes:
        args = ["node", "run", "--config", str(workdir / f"{n.name}.toml")]
        if n.adversary == "proxy":
            args += ["--adversary", "proxy", "--backend", backend_url]
        else:
            args += ["--emulate-batch-time", str(batch_time)]
            if n.adversary:
                args += ["--adversary", n.adversary]
            if n.adversary == "made-up":  # copies the backend's fingerprint: no engine load
                args += ["--backend", backend_url]
        procs.start(n.name, *args)


def size_emulation(
    profile: Profile, honest: int, cores: int, alone_s: float, concurrent_s: float | None
) -> tuple[float, str]:
    """The demo's emulated batch time in seconds, and what it was sized from in words.

    ``concurrent_s``: one batch while ``honest`` probe processes computed at once on this
    host (:class:`netcheck.lab.demo_probe.Probes`), the figure used when given; else (vLLM)
    ``alone_s``, the first reference batch timed alone, scaled by
    :func:`netcheck.lab.demo_sizing.honest_share` over ``cores``.
    """
    alone = f"one batch alone {alone_s:.2f} s"
    if concurrent_s is not None:
        measured = f"{honest} batches computed at once took {concurrent_s:.2f} s, {alone}"
    else:
        concurrent_s = honest_share(honest, cores) * alone_s
        measured = f"{alone} on {cores} CPUs, so {honest} at once ~{concurrent_s:.2f} s"
    return emulated_batch_time(profile.deadline.t_ref_s, concurrent_s), measured


async def _run(
    workdir: Path, rounds: int, profile_name: str, procs: Processes, serve: bool = False
) -> str:
    from netcheck.progress import progress_bar

    profile = load_profile(profile_name)
    nodes = demo_nodes(profile_name)
    coord_path, names = write_configs(workdir, profile_name, [n.name for n in nodes])
    cfg = load_coordinator_config(coord_path)
    count = (rounds + STARVED_RERUNS) * len(nodes) * profile.canaries_max
    cores = host_cores()
    console.print(host_line(cores, load_average_value()))
    honest = sum(1 for n in nodes if n.adversary is None)
    probes = None if profile.engine == "vllm" else Probes(profile_name, honest, procs.logs)
    try:
        with console.status(
            "loading the reference engine (converts or synthesizes the model once)"
        ):
            refs = await asyncio.to_thread(DemoReferences, cfg, profile)
        concurrent_s = None
        if probes is not None:
            with console.status(
                f"timing {honest} batches computed at once by {honest} processes, as the "
                "honest nodes will (sizes the emulation)"
            ):
                concurrent_s = concurrent_batch_time(await asyncio.to_thread(probes.run))
    finally:
        if probes is not None:
            probes.stop()
    try:
        with console.status("answering the first reference batch (timed)"):
            batch_wall = await asyncio.to_thread(refs.first_batch)
        batch_time, measured = size_emulation(profile, honest, cores, batch_wall, concurrent_s)
        profile_arg = profile_name
        if batch_time != profile.deadline.t_ref_s:
            why = f"sized to this host ({measured})"
            profile_arg = str(write_demo_profile(profile_name, workdir, batch_time, why))
        console.print(
            f"[bold]EMULATION[/bold]: {describe(profile, batch_time, measured)}; "
            f"the proxy pair shares one emulated GPU; once joined, the cheaters that "
            f"compute run at nice {CHEATER_NICE}."
        )
        procs.start("coordinator", "coordinator", "serve", "--config", str(coord_path))
        await _start_nodes(workdir, nodes, profile_arg, batch_time, procs)
        threads = refs.threads(cores)
        total = -(-count // profile.batch_size) * profile.batch_size
        with progress_bar(
            f"building reference answers ({threads} threads) while the nodes load",
            total=total,
        ) as advance:
            advance(refs.stored, total)
            await asyncio.to_thread(refs.rest, count, threads, lambda n: advance(n, total))
    finally:
        refs.close()
    with console.status(f"waiting for {len(nodes)} nodes to join (they load their engines)"):
        await wait_connected(cfg, procs, len(nodes), timeout_s=300)
    procs.renice([p for p in CHEATERS_THAT_COMPUTE if p in procs.procs], CHEATER_NICE)
    console.print(f"all {len(nodes)} nodes joined over signed sessions")

    reports: list[dict[str, Any]] = []
    honest_names = [n.name for n in nodes if n.adversary is None]
    reruns = 0
    starved_rounds: list[set[str]] = []
    while len(reports) < rounds:
        i = len(reports)
        before = overrun_counts(procs.logs, honest_names)
        with console.status(f"round {i + 1}/{rounds}: dispatch, release, compute, verify"):
            report = await admin_request(cfg, "POST", "/admin/rounds", {"profile": profile_name})
        print_round(report, names)
        starved = starved_nodes(
            report, names, honest_names, before, overrun_counts(procs.logs, honest_names)
        )
        if starved and reruns < STARVED_RERUNS:
            reruns += 1
            rid = str(report["round_id"])
            console.print(void_line(i + 1, rid, starved, reruns, STARVED_RERUNS))
            continue
        reports.append(report)
        starved_rounds.append(set(starved))
    outcome = summarize(console, NODES, reports, names, starved_rounds)
    report_overruns(console, procs.logs, procs.procs)
    if outcome == HOST_BUSY:
        console.print(
            "[yellow]HOST TOO BUSY[/yellow]: every cheater was caught, but honest nodes "
            "failed on time in rounds where their real compute on this host's CPU outlasted "
            "the emulated GPU: the host's load rose after the demo timed it (load average "
            f"now {load_average()} on {cores} CPUs). That is the host, not the method: run "
            f"the demo again when `uptime` shows a load average below {cores}."
        )
    if serve:
        await _serve_until_interrupted(cfg, coord_path, profile, len(nodes))
    return outcome


DEMO_MARKER = ".netcheck-demo"
"""File the demo leaves in its work folder: only folders carrying it are ever deleted."""


def prepare_workdir(workdir: Path) -> str | None:
    """Empty ``workdir`` for a new demo run; returns why it refused, or None.

    A folder is deleted only if it is empty or was made by an earlier demo run (it holds
    :data:`DEMO_MARKER`): ``--workdir .`` or ``--workdir configs`` must never wipe data.
    """
    if workdir.exists():
        if not workdir.is_dir():
            return f"{workdir} exists and is not a folder"
        if any(workdir.iterdir()) and not (workdir / DEMO_MARKER).is_file():
            return (
                f"{workdir} is not empty and was not made by `netcheck demo`; "
                "pick another --workdir or empty it yourself"
            )
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / DEMO_MARKER).write_text("made by `netcheck demo`; deleted by its next run\n")
    return None


def run_demo(workdir: Path, rounds: int, profile_name: str, serve: bool = False) -> int:
    """Run the demo; returns the process exit status (0 = every verdict as expected, 2 =
    refused to reuse ``workdir``)."""
    t0 = time.monotonic()
    refused = prepare_workdir(workdir)
    if refused:
        console.print(f"[red]demo refused:[/red] {refused}")
        return 2
    procs = Processes(workdir)
    try:
        outcome = asyncio.run(_run(workdir.resolve(), rounds, profile_name, procs, serve))
    except (RuntimeError, AdminError) as exc:
        console.print(f"[red]demo failed:[/red] {exc}")
        outcome = "failed"
    finally:
        procs.stop()
    took = time.monotonic() - t0
    ok = outcome == "ok"
    verdict = {
        "ok": "[green]OK[/green]",
        HOST_BUSY: "[yellow]INCONCLUSIVE[/yellow] (host too busy, see above)",
    }.get(outcome, "[red]FAILED[/red]")
    console.print(f"demo {verdict} in {took:.1f} s; logs and database in {workdir}/")
    return 0 if ok else 1
