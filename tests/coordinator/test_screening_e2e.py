"""Screening end to end with real processes on loopback: a proxy pair is flagged.

Processes (``python -m netcheck ...``): the coordinator, four honest nodes, two proxy
identities and the shared backend they forward to. GPU service time is EMULATED: each
honest node's GPU takes 0.3 s per batch; the shared backend's one GPU takes 0.2 s per
batch (beta = 1), so each proxy passes the deadline alone *and* co-loaded (0.4 s <
0.65 s): only the contention test can find the pair. Screening rounds run through the
admin API until the pair is confirmed (at most 4 x 16 rounds); then ``netcheck flags
list/show`` print the flag and its receipts verify under the proxies' keys.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from netcheck.admin_client import AdminError, admin_request
from netcheck.config import CoordinatorConfig, load_coordinator_config, load_profile
from netcheck.coordinator.commands import flags as flags_cli
from netcheck.keys import generate_key, parse_public_key, public_key_bytes, public_key_text
from netcheck.lab.demo import free_port
from netcheck.protocol.jobs import verify_receipt

pytestmark = pytest.mark.slow

HONEST_BATCH_S = 0.3
BACKEND_BATCH_S = 0.2
PROFILE_TOML = """\
name = "e2e-tiny"
engine = "torch"
model = "synth:tiny"
dtype = "float32"
device = "cpu"
batch_size = 4
prompt_len = 16
max_new_tokens = 4
canaries_min = 1
canaries_max = 1
cpu_threads = 1
dispatch_timeout_s = 10.0
result_timeout_s = 10.0

[deadline]
t_ref_s = 0.3
a = 1.5
slack_s = 0.2
"""
HONEST = ("honest-1", "honest-2", "honest-3", "honest-4")
PROXIES = ("proxy-a", "proxy-b")


def _toml(values: dict[str, Any]) -> str:
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())


class Procs:
    """Child processes, each logging to a file; all terminated at the end."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        logs.mkdir()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str) -> None:
        out = (self.logs / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "netcheck", *args], stdout=out, stderr=subprocess.STDOUT
        )

    def check(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"{name} exited ({p.returncode}):\n{tail}")

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def _setup(tmp: Path) -> tuple[Path, Path, dict[str, str]]:
    profile_path = tmp / "e2e-tiny.toml"
    profile_path.write_text(PROFILE_TOML)
    keys = {name: public_key_text(generate_key(tmp / f"{name}.pem")) for name in HONEST + PROXIES}
    coord_key = generate_key(tmp / "coordinator.pem")
    port = free_port()
    coord_path = tmp / "coordinator.toml"
    coord_path.write_text(
        _toml({"host": "127.0.0.1", "port": port, "identity_key": "coordinator.pem",
               "allowed_nodes": list(keys.values()), "database": "sqlite:///netcheck.db",
               "admin_token": secrets.token_urlsafe(24), "profiles": [str(profile_path)]})
    )  # fmt: skip
    for name in HONEST + PROXIES:
        (tmp / f"{name}.toml").write_text(
            _toml({"coordinator_url": f"ws://127.0.0.1:{port}/v1/ws",
                   "coordinator_key": public_key_text(coord_key),
                   "identity_key": f"{name}.pem", "profile": str(profile_path), "name": name})
        )  # fmt: skip
    return coord_path, profile_path, keys


async def _wait_connected(cfg: CoordinatorConfig, procs: Procs, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        procs.check()
        try:
            if (await admin_request(cfg, "GET", "/admin/status"))["connected"] >= n:
                return
        except AdminError:
            pass
        await asyncio.sleep(0.25)
    raise AssertionError(f"fewer than {n} nodes connected after {timeout_s} s")


async def _screen_until_flagged(cfg: CoordinatorConfig, profile: str) -> list[dict[str, Any]]:
    reports = []
    for _ in range(4):
        rep = await admin_request(
            cfg, "POST", "/admin/screening", {"rounds": 16, "profile": profile}
        )
        reports.append(rep)
        if any(f["kind"] == "shared-backend" and f["status"] == "confirmed" for f in rep["flags"]):
            break
    return reports


def test_proxy_pair_flagged_shared_backend_honest_nodes_not(tmp_path: Path) -> None:
    """Real node processes: the proxy pair is confirmed shared-backend, honest nodes are not."""
    t0 = time.monotonic()
    coord_path, profile_path, keys = _setup(tmp_path)
    cfg = load_coordinator_config(coord_path)
    profile = load_profile(profile_path)
    procs = Procs(tmp_path / "logs")
    try:
        backend_port = free_port()
        procs.start("backend", "node", "backend", "--profile", str(profile_path),
                    "--port", str(backend_port), "--emulate-batch-time", str(BACKEND_BATCH_S),
                    "--beta", "1.0")  # fmt: skip
        procs.start("coordinator", "coordinator", "serve", "--config", str(coord_path))
        for name in HONEST:
            procs.start(name, "node", "run", "--config", str(tmp_path / f"{name}.toml"),
                        "--emulate-batch-time", str(HONEST_BATCH_S))  # fmt: skip
        for name in PROXIES:
            procs.start(name, "node", "run", "--config", str(tmp_path / f"{name}.toml"),
                        "--adversary", "proxy", "--backend", f"http://127.0.0.1:{backend_port}")  # fmt: skip
        # References (the trusted side) while the processes start.
        subprocess.run(
            [sys.executable, "-m", "netcheck", "reference", "build", "--profile",
             str(profile_path), "--config", str(coord_path), "--count", "400"],
            check=True, capture_output=True,
        )  # fmt: skip
        asyncio.run(_wait_connected(cfg, procs, len(keys), timeout_s=60))
        t_ready = time.monotonic()
        reports = asyncio.run(_screen_until_flagged(cfg, profile.name))
        procs.check()
        t_screened = time.monotonic()

        runner = CliRunner()
        listed = runner.invoke(flags_cli, ["list", "--config", str(coord_path), "--json"])
        assert listed.exit_code == 0, listed.output
        all_flags = json.loads(listed.output)["flags"]
        confirmed = [f for f in all_flags if f["status"] == "confirmed"]
        proxy_keys = sorted(keys[p] for p in PROXIES)
        honest_keys = {keys[h] for h in HONEST}
        summary = [(r["analysis"] or {}).get("groups") for r in reports], all_flags
        assert [f["node_keys"] for f in confirmed if f["kind"] == "shared-backend"] == [
            proxy_keys
        ], summary
        assert not any(honest_keys & set(f["node_keys"]) for f in confirmed), summary

        flag_id = next(f["flag_id"] for f in confirmed if f["kind"] == "shared-backend")
        shown = runner.invoke(flags_cli, ["show", str(flag_id), "--config", str(coord_path)])
        assert shown.exit_code == 0 and "receipts" in shown.output, shown.output
        shown_json = runner.invoke(
            flags_cli, ["show", str(flag_id), "--config", str(coord_path), "--json"]
        )
        ev = json.loads(shown_json.output)["evidence"]
        assert ev["confirmed_members"] == proxy_keys
        assert all(m["slowdown"] > 1.5 for m in ev["confirmation"]["members"])
        assert set(ev["screening"]["schedule_bits"]) == set(proxy_keys)
        assert ev["receipts"], "the flag carries signed receipts"
        for r in ev["receipts"]:  # an analyst re-checks every receipt offline
            raw_key = public_key_bytes(parse_public_key(r["node_key"]))
            assert verify_receipt(raw_key, bytes.fromhex(r["signature"]),
                                  bytes.fromhex(r["session_id"]), r["round_id"],
                                  bytes.fromhex(r["commitment"]))  # fmt: skip
        # The pair passed every deadline: this was the contention test, not capacity.
        assert not any(f["kind"] == "capacity" for f in all_flags), all_flags
        n_rounds = sum(len(r["rounds"]) for r in reports)
        print(
            f"\nscreening e2e: startup {t_ready - t0:.1f} s, {n_rounds} screening rounds + "
            f"confirmation in {t_screened - t_ready:.1f} s, total {time.monotonic() - t0:.1f} s"
        )
    finally:
        procs.stop()
