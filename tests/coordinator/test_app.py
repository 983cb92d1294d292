"""netcheck.coordinator.app: a second `serve` on a busy port leaves live rounds alone."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from netcheck.coordinator.app import serve
from netcheck.coordinator.rounds import run_round
from netcheck.errors import ConfigError
from netcheck.keys import generate_key
from netcheck.lab.load import HashWorker, add_hash_references
from netcheck.lab.testing import running_coordinator, small_profile
from netcheck.storage import Store

PROFILE = small_profile("app", deadline={"t_ref_s": 5.0}, result_timeout_s=20.0)


def coordinator_config(tmp_path: Path, profiles: str, extra: str = "") -> Path:
    """Write ``tmp_path/c.toml`` (and a fresh ``c.pem``): loopback, a free port, open
    enrollment, SQLite in ``c.db``, ``profiles`` (a TOML list) and ``extra`` lines."""
    generate_key(tmp_path / "c.pem")
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'host = "127.0.0.1"\nport = 0\nidentity_key = "c.pem"\nopen_enrollment = true\n'
        f'database = "sqlite:///{tmp_path / "c.db"}"\nadmin_token = "{"t" * 24}"\n'
        f"profiles = {profiles}\n{extra}"
    )
    return cfg


async def start_and_stop(cfg: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``serve(cfg)`` until it is ready (30 s at most), then cancelled; its WARNING
    lines (logger ``netcheck.coordinator``) are in ``caplog``."""
    ready = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="netcheck.coordinator"):
        task = asyncio.create_task(serve(cfg, ready))
        await asyncio.wait_for(ready.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_second_serve_on_same_port_and_database_does_not_abort_the_live_round(
    tmp_path: Path,
) -> None:
    """A second ``serve`` on the live coordinator's port and database is refused
    ("cannot listen") and leaves its round running: ``complete``, never ``aborted``."""
    db = tmp_path / "netcheck.db"
    store = Store(f"sqlite:///{db}")
    add_hash_references(store, PROFILE, 20)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        rc.start(rc.node(HashWorker(PROFILE.max_new_tokens, delay_s=4.0), PROFILE.name))
        await rc.wait_connected(1, timeout_s=10.0)
        live = asyncio.create_task(run_round(rc.coord, PROFILE.name))
        for _ in range(100):  # until the round is recorded (planned) in the database
            if store.list_rounds():
                break
            await asyncio.sleep(0.05)
        generate_key(tmp_path / "second.pem")
        cfg = tmp_path / "second.toml"
        cfg.write_text(
            f'host = "127.0.0.1"\nport = {rc.port}\nidentity_key = "second.pem"\n'
            f'open_enrollment = true\ndatabase = "sqlite:///{db}"\n'
            f'admin_token = "{"t" * 24}"\nprofiles = ["cpu-factoring"]\n'
        )
        with pytest.raises(ConfigError, match="cannot listen"):
            await serve(cfg)
        assert not live.done(), "the round ended before the check; raise delay_s"
        assert [r["status"] for r in store.list_rounds()] == ["planned"]  # not "aborted"
        report = await live
        assert report.status == "complete"
        assert [str(o.verdict) for o in report.outcomes] == ["pass"]


async def test_serve_states_unsafe_profiles_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 10: at start the coordinator logs every profile that cannot tell two
    identities on one card apart (cpu-factoring has no [capacity] table)."""
    cfg = coordinator_config(tmp_path, '["cpu-factoring", "h200-torch-8b-bf16"]')
    await start_and_stop(cfg, caplog)
    text = caplog.text
    assert "profile cpu-factoring: capacity not measured" in text
    assert "cannot tell two identities on one card apart" in text
    assert "h200-torch-8b-bf16" not in text  # measured, margin 1.29
    # as the capacity 409: no bare `netcheck ...` command line (said one before session 15)
    assert "netcheck's `engine calibrate --profile cpu-factoring`" in text
    assert "`netcheck " not in text and "netcheck engine" not in text


def test_a_message_cap_below_a_profiles_results_is_refused_at_start(tmp_path: Path) -> None:
    """``max_message_bytes`` below the largest result a node of a configured profile may
    send: an honest result over it is refused (MESSAGE_TOO_LARGE, session closed after its
    job) and judged ``missing``, a capacity strike. Refused at start, naming the field and
    the profile (review, session 13: it was accepted)."""
    from netcheck.config import load_coordinator_config
    from netcheck.coordinator.app import coordinator_parts

    cfg = coordinator_config(tmp_path, '["cpu-tiny"]', "max_message_bytes = 8192\n")
    with pytest.raises(ConfigError, match=r"max_message_bytes: 8192 is below .* cpu-tiny may send"):
        coordinator_parts(load_coordinator_config(cfg), cfg)
    cfg.write_text(cfg.read_text().replace("8192", "9296"))  # 16 x 64 ids: 5 B each + 4 KiB
    _, profiles, store = coordinator_parts(load_coordinator_config(cfg), cfg)
    store.close()
    assert list(profiles) == ["cpu-tiny"]


async def test_serve_warns_when_slowness_floor_can_never_fire(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A slowness_floor so high that no answered round can be above it (100 x t_ref_s
    of cpu-tiny = 200 s > its result_timeout_s 120 s) turned the slowness stage off
    without a word: now a WARNING at start naming the field, its value and the profile."""
    cfg = coordinator_config(tmp_path, '["cpu-tiny"]', "slowness_floor = 100\n")
    await start_and_stop(cfg, caplog)
    warned = [r for r in caplog.records if "slowness_floor = 100" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert "for profile cpu-tiny" in warned[0].getMessage()
    assert "can never fire" in warned[0].getMessage()


def test_floor_problem_bound() -> None:
    """The floor is a problem exactly when floor x t_ref_s reaches result_timeout_s."""
    from netcheck.analysis.slowness import floor_problem

    assert floor_problem(1.25, "p", 2.0, 120.0) is None
    assert floor_problem(59.9, "p", 2.0, 120.0) is None
    assert floor_problem(60.0, "p", 2.0, 120.0) is not None
