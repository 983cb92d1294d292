"""A coordinator process plus client-host processes of emulated nodes, for load runs.

:class:`LoadRun` writes a coordinator config (open enrollment, the given database URL,
a profile file), stores hash references (:func:`netcheck.lab.load.add_hash_references`),
starts ``netcheck coordinator serve`` as a real subprocess and then client hosts
(``python -m netcheck.lab.load nodes``), drives rounds through the admin API and counts
rows in the database. Used by ``scripts/loadgen``, ``scripts/bench`` and tests/faults.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netcheck.admin_client import AdminError, admin_request
from netcheck.config import CoordinatorConfig, Profile, load_coordinator_config, load_profile
from netcheck.keys import generate_key, public_key_text
from netcheck.lab.demo import free_port
from netcheck.lab.load import VOCAB, add_hash_references
from netcheck.storage import Store
from netcheck.storage.reader import Reader


def write_profile(path: Path, name: str, **overrides: Any) -> Profile:
    """Write a profile TOML derived from ``cpu-tiny`` with ``overrides``; return it loaded.

    ``deadline`` overrides are a dict merged into the deadline table.
    """
    base = load_profile("cpu-tiny").model_dump(mode="json")
    deadline = {**base.pop("deadline"), **overrides.pop("deadline", {})}
    data = {**base, **overrides, "name": name}
    lines = [f"{k} = {json.dumps(v)}" for k, v in data.items() if v is not None]
    lines += ["", "[deadline]", *(f"{k} = {json.dumps(v)}" for k, v in deadline.items())]
    path.write_text("\n".join(lines) + "\n")
    return load_profile(path)


def rss_kib(pid: int) -> int:
    """Resident set size of process ``pid`` in KiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class LoadRun:
    """One coordinator subprocess and its client hosts in ``workdir``.

    Args:
        workdir: scratch directory (configs, keys, logs, SQLite file).
        database: SQLAlchemy URL (default: SQLite file in ``workdir``).
        profile_overrides: fields changed from ``cpu-tiny`` for the load profile.
        coordinator_overrides: fields added to or changed in the coordinator's file.
    """

    workdir: Path
    database: str | None = None
    profile_overrides: dict[str, Any] = field(default_factory=dict)
    coordinator_overrides: dict[str, Any] = field(default_factory=dict)
    coordinator: subprocess.Popen[bytes] | None = None
    hosts: list[subprocess.Popen[bytes]] = field(default_factory=list)
    profile: Profile = field(init=False)
    cfg_path: Path = field(init=False)
    cfg: CoordinatorConfig = field(init=False)
    coordinator_key: str = field(init=False)
    _next_index: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        self.profile = write_profile(
            self.workdir / "load-tiny.toml", "load-tiny", **self.profile_overrides
        )
        key = generate_key(self.workdir / "keys" / "coordinator.pem")
        self.coordinator_key = public_key_text(key)
        database = self.database or f"sqlite:///{self.workdir / 'netcheck.db'}"
        self.cfg_path = self.workdir / "coordinator.toml"
        values = {
            "host": "127.0.0.1",
            "port": free_port(),
            "identity_key": "keys/coordinator.pem",
            "open_enrollment": True,
            "database": database,
            "admin_token": secrets.token_urlsafe(24),
            "profiles": [str(self.workdir / "load-tiny.toml")],
            "handshake_timeout_s": 30.0,
            **self.coordinator_overrides,
        }
        self.cfg_path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
        self.cfg = load_coordinator_config(self.cfg_path)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.cfg.port}/v1/ws"

    def store(self) -> Store:
        """A new Store on the run's database (caller closes it)."""
        return Store(self.cfg.database)

    def add_references(self, count: int, vocab: int = VOCAB) -> int:
        """Store ``count`` hash references (token ids below ``vocab``) for the load profile."""
        with self.store() as store:
            return add_hash_references(store, self.profile, count, vocab=vocab)

    # -- processes ----------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / "logs" / f"{name}.log").open("ab")
        return subprocess.Popen(
            [sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir
        )

    def start_coordinator(self) -> subprocess.Popen[bytes]:
        """Start ``netcheck coordinator serve`` (a fresh process each call)."""
        args = ["-m", "netcheck", "coordinator", "serve", "--config", str(self.cfg_path)]
        self.coordinator = self._spawn("coordinator", args)
        return self.coordinator

    def start_hosts(
        self, nodes: int, hosts: int = 2, *, delay_s: float = 0.0, tag: str = "host"
    ) -> list[Path]:
        """Start ``hosts`` client-host processes running ``nodes`` nodes in all.

        Returns the report files each host writes once all its nodes are connected.
        """
        reports = []
        per = [nodes // hosts + (1 if i < nodes % hosts else 0) for i in range(hosts)]
        first = self._next_index  # node indexes pick distinct loopback source addresses
        self._next_index += len(per) * 10_000
        for i, n in enumerate(per):
            if n == 0:
                continue
            report = self.workdir / f"{tag}-{i}-{time.monotonic_ns()}.json"
            reports.append(report)
            args = [
                "-m", "netcheck.lab.load", "nodes", "--url", self.url,
                "--coordinator-key", self.coordinator_key, "--profile", self.profile.name,
                "--max-new-tokens", str(self.profile.max_new_tokens), "--count", str(n),
                "--delay", str(delay_s), "--first-index", str(first + i * 10_000),
                "--report", str(report),
            ]  # fmt: skip
            self.hosts.append(self._spawn(f"{tag}-{i}", args))
        return reports

    def stop_hosts(self) -> None:
        """Terminate every client host."""
        for p in self.hosts:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.hosts:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.hosts.clear()

    def kill_coordinator(self) -> None:
        """SIGKILL the coordinator (a crash: no shutdown code runs)."""
        if self.coordinator is not None and self.coordinator.poll() is None:
            self.coordinator.kill()
            self.coordinator.wait()

    def stop(self) -> None:
        """Stop hosts, then the coordinator (SIGTERM, then SIGKILL after 20 s)."""
        self.stop_hosts()
        c = self.coordinator
        if c is not None and c.poll() is None:
            c.send_signal(signal.SIGTERM)
            try:
                c.wait(timeout=20)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait()

    def __enter__(self) -> LoadRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- admin API ----------------------------------------------------------------

    async def admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return await admin_request(self.cfg, method, path, body)

    async def wait_connected(self, n: int, timeout_s: float = 120.0) -> float:
        """Poll the admin API until ``n`` nodes are connected; returns seconds waited.

        Raises RuntimeError (with the coordinator log's tail) on timeout or a dead process.
        """
        t0 = time.monotonic()
        connected = 0
        while time.monotonic() - t0 < timeout_s:
            if self.coordinator is not None and self.coordinator.poll() is not None:
                raise RuntimeError(f"coordinator exited:\n{self.log_tail('coordinator')}")
            try:
                connected = (await self.admin("GET", "/admin/status"))["connected"]
            except AdminError:
                connected = -1
            if connected >= n:
                return time.monotonic() - t0
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{connected}/{n} nodes connected after {timeout_s:.0f} s")

    async def run_round(self) -> dict[str, Any]:
        """Run one round through the admin API; returns its report."""
        report: dict[str, Any] = await self.admin(
            "POST", "/admin/rounds", {"profile": self.profile.name}
        )
        return report

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.workdir / "logs" / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    # -- database checks ----------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Row counts: rounds, results, verdicts, distinct (round, node) pairs of each,
        spent canaries and canary checks recorded in verdicts."""
        with self.store() as store:
            return Reader(store).integrity_counts()
