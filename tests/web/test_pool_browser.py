"""In Chromium: the canary-pool banner, ``unchecked`` badges that can be read, and a pass
rate over checked rounds only.

Real coordinator with the dashboard, two honest node clients over loopback websockets
(hash-based fake engine), SQLite; the pool holds one batch of references, so the rounds
after it run out are ``unchecked``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from web_support import FakeEngine, web_coordinator

from netcheck.config import DeadlineParams, Profile, load_profile
from netcheck.coordinator.rounds import run_round
from netcheck.node.workers import EngineWorker
from netcheck.references.build import build_references


@pytest.fixture
def profile() -> Profile:
    return load_profile("cpu-tiny").model_copy(
        update={
            "deadline": DeadlineParams(t_ref_s=0.5, a=1.0, b=1.0, p99_s=0.0, slack_s=0.5),
            "dispatch_timeout_s": 3.0,
            "result_timeout_s": 3.0,
        }
    )


def _style(driver: Any, selector: str, prop: str) -> str:
    return str(
        driver.execute_script(
            "return getComputedStyle(document.querySelector(arguments[0]))[arguments[1]];",
            selector,
            prop,
        )
    )


def check_pages(driver: Any, base: str, token: str, node: str, unchecked_round: str) -> None:
    """Banner with 0 rounds left and the build command; readable unchecked badges; 100%."""
    driver.get(f"{base}/dashboard/nodes?token={quote(token)}")
    banner = driver.find_element("id", "pool-banner")
    assert "pool-warn" in banner.get_attribute("class")
    assert banner.find_element("css selector", ".rounds-left").text == "0"
    assert "netcheck reference build --profile cpu-tiny" in banner.text
    row = driver.find_element("css selector", f"tr[data-node='{node}']")
    assert row.find_element("css selector", "td.pass-rate").text == "100%"

    driver.get(f"{base}/dashboard/rounds/{quote(unchecked_round)}")
    badge = "table#verdicts .v-unchecked"
    assert driver.find_element("css selector", badge).text == "unchecked"
    assert _style(driver, badge, "color") != _style(driver, badge, "backgroundColor")
    assert _style(driver, badge, "color") not in ("rgb(255, 255, 255)",)
    assert driver.find_element("id", "pool-banner")  # on every page

    driver.get(f"{base}/dashboard/nodes/{quote(node, safe='')}")
    rate = driver.find_element("id", "node-pass-rate").text
    assert rate.startswith("100%") and "unchecked" in rate


async def test_pool_banner_and_unchecked_in_chromium(
    tmp_path: Path, profile: Profile, browser: Any
) -> None:
    """After the pool runs out the banner warns, unchecked is styled, pass rate is 100%."""
    engine = FakeEngine(profile)
    async with web_coordinator(tmp_path, [profile]) as rc:
        build_references(profile, engine, rc.coord.store, profile.batch_size, seed=1)
        keys = rc.start_named(
            {"h1": EngineWorker(engine), "h2": EngineWorker(engine)},  # type: ignore[arg-type]
            profile.name,
        )
        await rc.wait_connected(2)
        verdicts: list[set[str]] = []
        unchecked_round = ""
        for _ in range(10):
            report = await run_round(rc.coord, profile.name)
            verdicts.append({str(o.verdict) for o in report.outcomes})
            if verdicts[-1] == {"unchecked"}:
                unchecked_round = report.round_id
                break
        assert unchecked_round, verdicts
        assert "pass" in verdicts[0]
        await asyncio.to_thread(
            check_pages, browser, f"http://127.0.0.1:{rc.port}",
            rc.coord.config.admin_token, keys["h1"], unchecked_round,
        )  # fmt: skip
