"""``netcheck doctor``: each check against a live coordinator on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from node_support import node_config

from netcheck.engines.fingerprint import fingerprint_id
from netcheck.keys import load_private_key, public_key_text
from netcheck.lab.testing import running_coordinator, small_profile
from netcheck.node.doctor import run_checks
from netcheck.storage import ReferenceRow, Store

PROFILE = small_profile("cpu-tiny")  # same name as the repo profile the doctor loads


async def doctor(cfg: Path, selftest: bool = False) -> dict[str, tuple[bool, str]]:
    checks = await asyncio.to_thread(run_checks, cfg, selftest=selftest)
    return {c.name: (c.ok, c.detail) for c in checks}


def engine_fingerprint() -> dict[str, str | int]:
    """The fingerprint the doctor's engine (the repo's cpu-tiny profile) claims."""
    from netcheck.config import load_profile
    from netcheck.engines import load_engine

    return dict(load_engine(load_profile("cpu-tiny")).fingerprint)


def add_refs(store: Store, fingerprint: dict[str, str | int], n: int = 4) -> None:
    fp = fingerprint_id(fingerprint)
    rows = [ReferenceRow(f"d{i}", "cpu-tiny", fp, f"q{i}", (1,), 0.0) for i in range(n)]
    store.add_references(rows)
    store.add_reference_set("cpu-tiny", fp, fingerprint)


async def test_healthy_node_passes_every_check(tmp_path: Path) -> None:
    """Right key, reachable coordinator, engine and quick selftest: all ok, no session."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        add_refs(rc.coord.store, await asyncio.to_thread(engine_fingerprint))
        cfg = node_config(tmp_path, rc.url, public_key_text(rc.identity))
        got = await doctor(cfg, selftest=True)
        assert all(ok for ok, _ in got.values()), got  # "host load" may warn: it passes
        assert list(got) == [
            "config", "identity key", "profile", "capacity", "host load", "coordinator", "engine",
            "coordinator accepts", "quick selftest",
        ]  # fmt: skip
        assert "4 unspent references" in got["coordinator accepts"][1]
        assert rc.coord.sessions == {}  # the doctor never joins


async def test_wrong_pinned_key_fails_at_coordinator(tmp_path: Path) -> None:
    """A node pinning another coordinator key fails the coordinator check."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        other = public_key_text(Ed25519PrivateKey.generate())
        cfg = node_config(tmp_path, rc.url, other)
        got = await doctor(cfg)
        assert got["coordinator"][0] is False
        assert "WRONG_COORDINATOR_KEY" in got["coordinator"][1]
        assert f"coordinator_key in the node config ({other})" in got["coordinator"][1]
        assert "engine" not in got  # later checks are skipped


async def test_unadmitted_key_and_unreachable(tmp_path: Path) -> None:
    """A key outside the allowlist, and a closed port, are both reported clearly."""
    async with running_coordinator(
        tmp_path, [PROFILE], allowed=[Ed25519PrivateKey.generate()]
    ) as rc:
        cfg = node_config(tmp_path, rc.url, public_key_text(rc.identity))
        got = await doctor(cfg)
        assert "UNKNOWN_NODE_KEY" in got["coordinator"][1]
        mine = public_key_text(load_private_key(tmp_path / "node.pem"))
        assert f"{mine}; ask the operator to add it to allowed_nodes" in got["coordinator"][1]
    bad = tmp_path / "bad.toml"
    bad.write_text(cfg.read_text().replace(f":{rc.port}/", ":1/"))
    got = await doctor(bad)
    assert got["coordinator"][0] is False and "cannot reach" in got["coordinator"][1]


def test_missing_config_fails_first(tmp_path: Path) -> None:
    """A missing config file is the first and only failed check."""
    checks = run_checks(tmp_path / "nope.toml")
    assert [(c.name, c.ok) for c in checks] == [("config", False)]


def test_capacity_check_states_an_unsafe_profile_plainly() -> None:
    """The doctor's capacity row warns for an unmeasured profile (it does not fail: it is
    the profile's property, not the node's)."""
    from netcheck.lab.testing import small_profile
    from netcheck.node.doctor import capacity_check

    check = capacity_check(small_profile(), "bin/netcheck")
    assert check.name == "capacity" and check.ok and check.warning  # shown as "warn"
    assert "cannot tell two identities on one card apart" in check.detail
    assert "`bin/netcheck engine calibrate" in check.detail  # how netcheck was called


async def test_refused_profile_and_foreign_fingerprint_fail(tmp_path: Path) -> None:
    """A profile the coordinator does not accept, and a fingerprint whose references
    were built with another cpu_threads, each fail naming the cause; no session opens."""
    other = small_profile("other")
    async with running_coordinator(tmp_path, [other]) as rc:
        cfg = node_config(tmp_path, rc.url, public_key_text(rc.identity))
        got = await doctor(cfg)
        ok, detail = got["coordinator accepts"]
        assert not ok and "does not accept profile 'cpu-tiny'" in detail and "other" in detail
        assert rc.coord.sessions == {}
    second = tmp_path / "second"
    second.mkdir()
    async with running_coordinator(second, [PROFILE]) as rc:
        cfg = node_config(second, rc.url, public_key_text(rc.identity))
        fp = await asyncio.to_thread(engine_fingerprint)
        add_refs(rc.coord.store, {**fp, "cpu_threads": 7})
        got = await doctor(cfg)
        ok, detail = got["coordinator accepts"]
        assert not ok and "no references for fingerprint" in detail
        assert "cpu_threads: node" in detail and "references 7" in detail
        assert rc.coord.sessions == {}


def test_host_load_check_warns_only_above_the_core_count() -> None:
    """More runnable processes than cores is a warning naming the load (it does not fail:
    the node can still join); at or below the core count the row only states it."""
    from netcheck.node.doctor import host_load_check

    busy = host_load_check(22.4, 16)
    assert busy.ok and busy.warning and "load average 22.4 on 16 cores" in busy.detail
    assert busy.detail.startswith("WARNING") and "capacity strikes" in busy.detail
    calm = host_load_check(15.9, 16)
    assert calm.ok and not calm.warning and calm.detail == "load average 15.9 on 16 cores"
    assert host_load_check().name == "host load"  # this machine's own figures
