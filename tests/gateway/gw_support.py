"""Shared setup of the gateway tests: a cheap profile, emulated nodes, a cluster."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from netcheck.config import DeadlineParams, Profile
from netcheck.lab.demo import free_port
from netcheck.lab.loadrun import write_profile
from netcheck.lab.testing import RunningCoordinator

PROFILE = Profile(
    name="gw-test",
    engine="torch",
    model="synth:tiny",
    dtype="float32",
    batch_size=4,
    prompt_len=32,
    max_new_tokens=6,
    canaries_min=1,
    canaries_max=2,
    deadline=DeadlineParams(t_ref_s=1.0, slack_s=2.0),
    dispatch_timeout_s=4.0,
    result_timeout_s=8.0,
)

#: Fast timeouts so a test does not wait for a gateway that is gone.
FAST = {"join_timeout_s": 8.0, "close_grace_s": 1.0, "release_margin_s": 0.2}


async def until(check: Callable[[], bool | Awaitable[bool]], timeout_s: float = 20.0) -> None:
    """Poll ``check`` every 50 ms until true (fails the test after ``timeout_s``)."""
    async with asyncio.timeout(timeout_s):
        while True:
            v = check()
            if not isinstance(v, bool):
                v = await v
            if v:
                return
            await asyncio.sleep(0.05)


async def leader_of(*gws: RunningCoordinator) -> RunningCoordinator:
    """The running gateway that holds the leader lock (waits for one)."""
    await until(lambda: any(g.coord.control.is_leader for g in gws))  # type: ignore[attr-defined]
    return next(g for g in gws if g.coord.control.is_leader)  # type: ignore[attr-defined]


def write_gateway_config(
    tmp_path: Path, database: str, gateway_id: str, profile_path: Path, key_path: Path
) -> tuple[Path, int, str]:
    """A gateway config file on a free port; returns (path, port, admin token)."""
    port = free_port()
    token = secrets.token_urlsafe(24)
    values = {
        "host": "127.0.0.1", "port": port, "identity_key": str(key_path),
        "open_enrollment": True, "database": database, "admin_token": token,
        "profiles": [str(profile_path)], "gateway_id": gateway_id, **FAST,
    }  # fmt: skip
    path = tmp_path / f"{gateway_id}.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    return path, port, token


def spawn_gateway(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """``netcheck gateway serve`` as a child process (killed by the test)."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "netcheck", "gateway", "serve", "--config", str(config)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def profile_file(tmp_path: Path) -> tuple[Path, Profile]:
    """:data:`PROFILE` as a TOML file (for gateway subprocesses) and loaded back."""
    path = tmp_path / f"{PROFILE.name}.toml"
    return path, write_profile(path, PROFILE.name, **PROFILE.model_dump(exclude={"name"}))
