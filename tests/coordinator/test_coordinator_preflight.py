"""``netcheck coordinator check``: each check of a coordinator's setup, without a start."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from netcheck.cli import main
from netcheck.config import load_profile
from netcheck.coordinator.preflight import pool_checks, run_checks
from netcheck.keys import generate_key
from netcheck.lab.testing import canary_store

FP = {"engine": "torch", "model": "synth:tiny"}


def write_config(tmp_path: Path, extra: str = "", profiles: str = '["cpu-tiny"]') -> Path:
    """A coordinator.toml in ``tmp_path``; a free loopback port unless ``extra`` names
    one (the default 8470 may be taken by another process on a shared machine, which
    would fail the listen-address check too)."""
    cfg = tmp_path / "coordinator.toml"
    if "port =" not in extra:
        extra += f"port = {free_port()}\n"
    cfg.write_text(
        'identity_key = "keys/coordinator.pem"\nopen_enrollment = true\n'
        f'admin_token = "a-test-token-of-some-length"\nprofiles = {profiles}\n'
        f'database = "sqlite:///netcheck.db"\n{extra}'
    )
    return cfg


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check(cfg: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["coordinator", "check", "--config", str(cfg)])
    return result.exit_code, result.output


def lines(output: str) -> dict[str, str]:
    """check name -> its whole line."""
    return {ln[6:].split(":", 1)[0]: ln for ln in output.splitlines() if ln[4:6] == "  "}


def test_a_ready_setup_passes_every_check(tmp_path: Path) -> None:
    """Key, profile and a pool with canaries: every check ok (the secret, the spool to
    be created), exit 0, the canary count shown; nothing is created."""
    generate_key(tmp_path / "keys" / "coordinator.pem")
    canary_store(tmp_path / "netcheck.db", load_profile("cpu-tiny"), FP, 12).close()
    port = free_port()
    cfg = write_config(tmp_path, f"port = {port}\n")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, out = check(cfg)
    assert code == 0, out
    found = lines(out)
    assert "FAIL" not in out
    for name in ("config", "listen address", "identity key", "screening schedule secret",
                 "spool", "profile cpu-tiny", "database", "references cpu-tiny"):  # fmt: skip
        assert name in found, (name, out)
    assert "the first start creates it" in found["screening schedule secret"]
    assert "12 unspent of 12" in found["references cpu-tiny"]
    assert f"ws://127.0.0.1:{port}/v1/ws" in found["listen address"]
    warned = sum(1 for line in out.splitlines() if line.startswith("warn"))
    assert warned >= 1 and "warn  profile cpu-tiny" in out  # capacity not measured
    # the line names the profile once: "profile cpu-tiny: engine ...; capacity not measured"
    assert "B = 16; capacity not measured (" in found["profile cpu-tiny"]
    assert found["profile cpu-tiny"].count("profile cpu-tiny:") == 1
    assert out.splitlines()[-1].startswith(  # warnings are counted, not hidden
        f"all 8 checks passed, {warned} of them with a warning (warn above); start it with: "
        "netcheck coordinator serve"
    )
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no secret, spool, db files


def test_the_capacity_hint_calls_netcheck_as_it_was_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like every other hint of the check, the capacity warning's commands start with
    the way netcheck was called (``invoked_as``), not a bare ``netcheck``."""
    monkeypatch.setattr(sys, "argv", [os.path.join(".venv", "bin", "netcheck")])
    _, out = check(write_config(tmp_path, f"port = {free_port()}\n"))
    line = lines(out)["profile cpu-tiny"]
    assert "`.venv/bin/netcheck engine calibrate --profile cpu-tiny` on the trusted machine" in (
        line
    )
    assert "`.venv/bin/netcheck engine pool`" in line and "`netcheck " not in line


def test_each_missing_part_fails_with_its_fix(tmp_path: Path) -> None:
    """No key, a group-readable secret, an unknown profile and no database yet: one FAIL
    line each, naming the fix; exit 1; the database file is not created."""
    secret = tmp_path / "keys" / "schedule.secret"
    secret.parent.mkdir()
    secret.write_bytes(os.urandom(32))
    secret.chmod(0o644)
    code, out = check(write_config(tmp_path, profiles='["cpu-tiny", "no-such-profile"]'))
    assert code == 1, out
    found = lines(out)
    key = tmp_path / "keys" / "coordinator.pem"
    assert found["identity key"].startswith("FAIL")
    assert f"create it with: netcheck keygen {key}" in found["identity key"]
    assert found["screening schedule secret"].startswith("FAIL")
    assert f"chmod 600 {secret}" in found["screening schedule secret"]
    assert found["profile no-such-profile"].startswith("FAIL")
    assert found["profile cpu-tiny"].startswith("warn")  # capacity unmeasured, as a start says
    assert "does not exist yet: the first start creates it" in found["database"]
    assert found["references cpu-tiny"].startswith("FAIL")
    assert "netcheck reference build --profile cpu-tiny --config" in found["references cpu-tiny"]
    assert out.splitlines()[-1] == "4 of 9 checks failed"
    assert not (tmp_path / "netcheck.db").exists()


def test_bad_config_field_is_one_failing_check(tmp_path: Path) -> None:
    """A bad field: the loader's message (file and field) as the one FAIL line, exit 1."""
    code, out = check(write_config(tmp_path, "port = 99999\n"))
    assert code == 1, out
    assert out.splitlines()[0].startswith("FAIL  config: ")
    assert "coordinator.toml: port:" in out


def test_unreachable_database_and_bad_host_fail(tmp_path: Path) -> None:
    """A PostgreSQL server that refuses connections and a host that is not an address:
    both FAIL with the reason; the pools are then said to be unchecked."""
    generate_key(tmp_path / "keys" / "coordinator.pem")
    cfg = write_config(tmp_path, 'host = "not a host!"\n')
    text = cfg.read_text().replace(
        "sqlite:///netcheck.db", "postgresql+psycopg://u:p@127.0.0.1:1/netcheck"
    )
    cfg.write_text(text)
    checks = {c.name: c for c in run_checks(cfg)}
    assert (
        not checks["listen address"].ok and "not an IP address" in checks["listen address"].detail
    )
    db = checks["database"]
    assert not db.ok and "127.0.0.1" in db.detail and "reference pools not checked" in db.detail


def test_database_in_a_folder_that_cannot_exist_fails(tmp_path: Path) -> None:
    """A SQLite path under a regular file: no start could create it."""
    generate_key(tmp_path / "keys" / "coordinator.pem")
    (tmp_path / "afile").write_text("")
    cfg = write_config(tmp_path)
    cfg.write_text(cfg.read_text().replace("netcheck.db", "afile/sub/netcheck.db"))
    checks = {c.name: c for c in run_checks(cfg)}
    assert not checks["database"].ok
    assert "is not a writable folder" in checks["database"].detail


def test_a_spent_pool_fails_and_a_low_one_warns(tmp_path: Path) -> None:
    """Every canary spent: FAIL with the build command; a few rounds left: warn."""
    profile = load_profile("cpu-tiny")
    rows = [{"profile": "cpu-tiny", "fingerprint_id": "ab" * 32, "total": 40, "unspent": 0}]
    (spent,) = pool_checks(tmp_path / "c.toml", {"cpu-tiny": profile}, rows)  # type: ignore[arg-type]
    assert not spent.ok and "every canary is spent" in spent.detail
    rows[0]["unspent"] = profile.canaries_max * 3
    (low,) = pool_checks(tmp_path / "c.toml", {"cpu-tiny": profile}, rows)  # type: ignore[arg-type]
    assert low.ok and low.warning and "3 rounds left" in low.detail


def test_a_port_in_use_or_a_foreign_host_fails_the_listen_check() -> None:
    """A port another process listens on fails with the command that shows the holder;
    an address that is not this machine's fails; a free port passes."""
    from netcheck.coordinator.preflight import bind_problem

    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = int(held.getsockname()[1])
        problem = bind_problem("127.0.0.1", port)
        assert problem is not None and "is in use" in problem and f"sport = :{port}" in problem
    assert bind_problem("127.0.0.1", free_port()) is None
    foreign = bind_problem("192.0.2.1", free_port())  # TEST-NET-1, never local
    assert foreign is not None and "not an address of this machine" in foreign


def test_a_message_cap_below_a_profiles_results_fails_the_profile_check(tmp_path: Path) -> None:
    """``max_message_bytes`` below the largest result a cpu-tiny node may send (9,296
    bytes): the profile's check fails with the bound, as a start would refuse it."""
    code, out = check(write_config(tmp_path, "max_message_bytes = 8192\n"))
    assert code == 1, out
    line = lines(out)["profile cpu-tiny"]
    assert line.startswith("FAIL") and "max_message_bytes: 8192 is below" in line, out
    assert "Set it to at least 9296" in line


def test_a_slowness_floor_that_can_never_fire_is_a_warning(tmp_path: Path) -> None:
    """``slowness_floor = 100``: 100 x cpu-tiny's t_ref (2 s) is above its
    result_timeout_s (120 s), so no answered round is ever above the floor and the
    slowness stage is off without a word. Now a warning naming the field and value (not a
    failure: the operator may mean it); the default floor gives none."""
    code, out = check(write_config(tmp_path, "slowness_floor = 100\n"))
    line = lines(out).get("slowness_floor", "")
    assert line.startswith("warn") and "slowness_floor = 100: for profile cpu-tiny" in line, out
    assert "can never fire" in line and "result_timeout_s (120 s)" in line
    assert "FAIL  slowness_floor" not in out
    code, out = check(write_config(tmp_path, "slowness_floor = 1.5\n"))
    assert "slowness_floor" not in lines(out), out
