"""The flag lifecycle: open -> acknowledged -> resolved / false-positive (reopen), with
who, when and a note, through the admin API, the CLI and the dashboard (Chromium)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from test_pool_surfaces import write_config

from netcheck.cli import main
from netcheck.exitcodes import Exit
from netcheck.lab.testing import running_coordinator, small_profile
from netcheck.storage.reviews import ReviewError, ReviewStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from web_support import CHROMEDRIVER, CHROMIUM, chrome_driver  # noqa: E402

PROFILE = small_profile("pool")


def test_transitions_are_checked(tmp_path: Path) -> None:
    """Only the documented moves are allowed; every move is kept with who and note."""
    from netcheck.storage import Store
    from netcheck.storage.flags import FlagStore

    store = Store(f"sqlite:///{tmp_path / 'n.db'}")
    fid = FlagStore(store).add_flag("relay", "pending", "p", ["k"], 1.0, 0.5, {})
    reviews = ReviewStore(store)
    with pytest.raises(ReviewError, match="can go to"):
        reviews.review(fid, "open", "ann")
    reviews.review(fid, "acknowledged", "ann", "looking")
    reviews.review(fid, "false-positive", "bob", "same rack, declared")
    with pytest.raises(ReviewError):
        reviews.review(fid, "resolved", "bob")
    with pytest.raises(ReviewError, match="no flag"):
        reviews.review(fid + 1, "acknowledged", "ann")
    assert [(r["state"], r["by"]) for r in reviews.history(fid)] == [
        ("acknowledged", "ann"), ("false-positive", "bob"),
    ]  # fmt: skip
    assert reviews.current([fid])[fid]["note"] == "same rack, declared"
    assert reviews.histories([fid, fid + 1]) == {fid: reviews.history(fid), fid + 1: []}
    store.close()


def check_dashboard(driver: Any, base: str, token: str, fid: int) -> None:
    driver.get(f"{base}/dashboard/flags?token={quote(token)}")
    row = driver.find_element("css selector", f"tr[data-flag='{fid}']")
    assert row.find_element("css selector", "td.review").text.startswith("acknowledged (ann)")
    driver.get(f"{base}/dashboard/flags/{fid}")
    review = driver.find_element("id", "flag-review").text
    assert "acknowledged by ann: checking the rack" in review
    assert driver.find_element("id", "no-pair-plots")  # one node: no 1x1 matrix


async def test_a_refused_review_names_the_command_to_run(tmp_path: Path) -> None:
    """`flags ack` on a false-positive flag exits 6 and says to run `flags reopen` first
    (with the same --config), then `flags ack`; `flags false-positive` on it again says
    it already is; a note over 2000 characters is a 400 (exit 2), without a hint."""
    import shlex

    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        cfg = str(write_config(tmp_path, rc))
        fid = rc.coord.screening.flags.add_flag(
            "capacity", "confirmed", PROFILE.name, ["ed25519:x"], 3.0, 3.0, {}
        )

        def flags_cli(*args: str) -> Any:
            argv = ["flags", *args, str(fid), "--config", cfg, "--by", "ann"]
            return CliRunner().invoke(main, argv)

        assert (await asyncio.to_thread(flags_cli, "false-positive")).exit_code == 0
        refused = await asyncio.to_thread(flags_cli, "ack")
        assert refused.exit_code == Exit.CONFLICT, refused.output
        out = " ".join(refused.output.split())
        config = f"--config {shlex.quote(cfg)}"
        assert f"flag {fid} is false-positive: it can go to open" in out, out
        assert (
            f"run `netcheck flags reopen {config} {fid}` first, "
            f"then `netcheck flags ack {config} {fid}`"
        ) in out, out
        again = await asyncio.to_thread(flags_cli, "false-positive")
        assert again.exit_code == Exit.CONFLICT and "(it is false-positive already)" in again.output
        long_note = await asyncio.to_thread(flags_cli, "reopen", "--note", "x" * 2001)
        assert long_note.exit_code == Exit.USAGE, long_note.output  # a 400, not a 409
        assert "longer than" in long_note.output and "run `" not in long_note.output


async def test_review_through_cli_api_and_dashboard(tmp_path: Path) -> None:
    """`flags ack` records who and why; an illegal move exits 6; the pages show it."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        cfg = str(write_config(tmp_path, rc))
        fid = rc.coord.screening.flags.add_flag(
            "capacity", "confirmed", PROFILE.name, ["ed25519:x"], 3.0, 3.0, {}
        )
        run = CliRunner().invoke
        ack = await asyncio.to_thread(
            run, main,
            ["flags", "ack", str(fid), "--config", cfg, "--by", "ann", "--note", "checking the rack"],
        )  # fmt: skip
        assert ack.exit_code == 0 and f"flag {fid}: acknowledged by ann" in ack.output
        again = await asyncio.to_thread(
            run, main, ["flags", "reopen", str(fid), "--config", cfg, "--by", "ann"]
        )
        assert again.exit_code == 0, again.output
        bad = await asyncio.to_thread(
            run, main, ["flags", "reopen", str(fid), "--config", cfg, "--by", "ann"]
        )
        assert bad.exit_code == Exit.CONFLICT and "can go to" in bad.output
        await asyncio.to_thread(
            run, main,
            ["flags", "ack", str(fid), "--config", cfg, "--by", "ann", "--note", "checking the rack"],
        )  # fmt: skip
        listed = json.loads(
            (
                await asyncio.to_thread(run, main, ["flags", "list", "--config", cfg, "--json"])
            ).output
        )
        assert listed["flags"][0]["review"]["state"] == "acknowledged"
        # the list carries the whole history too, in order (it held the latest only)
        history = [(r["state"], r["by"]) for r in listed["flags"][0]["reviews"]]
        assert history == [("acknowledged", "ann"), ("open", "ann"), ("acknowledged", "ann")]
        shown = json.loads(
            (
                await asyncio.to_thread(
                    run, main, ["flags", "show", str(fid), "--config", cfg, "--json"]
                )
            ).output
        )
        assert [r["state"] for r in shown["reviews"]] == ["acknowledged", "open", "acknowledged"]
        import shutil

        if shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER):
            driver = chrome_driver()
            try:
                await asyncio.to_thread(
                    check_dashboard, driver, f"http://127.0.0.1:{rc.port}",
                    rc.coord.config.admin_token, fid,
                )  # fmt: skip
            finally:
                driver.quit()
