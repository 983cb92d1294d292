"""The dashboard in a real headless Chromium after real rounds over loopback websockets.

Real pieces: the coordinator's aiohttp server with the dashboard routes, node clients
with the real handshake and encrypted frames, the round runner, SQLite, a flag stored
through the screening work's FlagStore, Debian's chromium driven by Selenium. The engine
is a hash-based fake (instant and deterministic) so the test stays small.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import pytest
from web_support import FakeEngine, web_coordinator

from netcheck.config import DeadlineParams, Profile, load_profile
from netcheck.coordinator.rounds import run_round
from netcheck.keys import public_key_text
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.emulation import EmulatedGPU, EmulatedWorker
from netcheck.node.workers import EngineWorker
from netcheck.references.build import build_references
from netcheck.storage.flags import FlagStore

ROUNDS = 2


@pytest.fixture
def profile() -> Profile:
    base = load_profile("cpu-tiny")
    return base.model_copy(
        update={
            "deadline": DeadlineParams(t_ref_s=0.3, a=1.0, b=1.0, p99_s=0.0, slack_s=0.4),
            "dispatch_timeout_s": 3.0,
            "result_timeout_s": 3.0,
        }
    )


def _svg_points(driver: Any, plot_id: str, gid_prefix: str = "data-") -> int:
    """Drawn elements (paths, marker uses) inside data series of one plot's SVG."""
    return int(
        driver.execute_script(
            "const svg = document.querySelector(arguments[0] + ' svg');"
            "if (!svg) return -1;"
            "let n = 0; for (const g of svg.querySelectorAll('g[id^=\"' + arguments[1] + '\"]'))"
            "  n += g.querySelectorAll('path, use').length;"
            "return n;",
            f"#{plot_id}",
            gid_prefix,
        )
    )


def _verdicts_in(driver: Any, table_id: str) -> dict[str, str]:
    rows = driver.find_elements("css selector", f"table#{table_id} tbody tr[data-node]")
    return {
        r.get_attribute("data-node"): r.find_element("css selector", "td.verdict").text.split()[0]
        for r in rows
    }


def check_pages(
    driver: Any, base: str, token: str, expected: dict[str, str], round_id: str, flag_id: int
) -> None:
    """Every page loads in Chromium, its tables hold the verdicts and its plots rendered;
    the header's Log out button then ends the session."""
    driver.get(f"{base}/dashboard/nodes?token={quote(token)}")  # logs in, drops the token
    assert "token=" not in driver.current_url
    assert _verdicts_in(driver, "nodes") == expected

    driver.get(f"{base}/dashboard/rounds/{quote(round_id)}")
    assert _verdicts_in(driver, "verdicts") == expected
    assert driver.find_element("id", "release-skew").text.endswith("ms")
    assert _svg_points(driver, "timeline-plot", "data-release") >= len(expected)
    assert _svg_points(driver, "timeline-plot", "data-arrival") >= len(expected) - 1
    assert _svg_points(driver, "timeline-plot", "data-deadline") >= len(expected)

    late = next(k for k, v in expected.items() if v == "late")
    driver.get(f"{base}/dashboard/nodes/{quote(late, safe='')}")
    history = driver.find_elements("css selector", "table#history td.verdict")
    assert [h.text for h in history] == ["late"] * ROUNDS
    assert _svg_points(driver, "latency-plot", "data-latency") >= ROUNDS
    assert _svg_points(driver, "latency-plot", "data-deadline") >= 1

    driver.get(f"{base}/dashboard/flags")
    assert driver.find_element("css selector", f"tr[data-flag='{flag_id}']")
    driver.get(f"{base}/dashboard/flags/{flag_id}")
    assert driver.find_element("id", "flag-statistic").text == "7.5"
    assert driver.find_element("id", "flag-threshold").text == "3"
    assert _svg_points(driver, "loaded-plot") >= ROUNDS
    assert _svg_points(driver, "coload-plot", "data-heatmap") >= 1
    assert _svg_points(driver, "corr-plot", "data-heatmap") >= 1
    link = driver.find_element("id", "receipts-link").get_attribute("href")
    assert link.endswith(f"/dashboard/flags/{flag_id}/receipts.json")

    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element("id", "logout").click()  # a POST form: Chromium sends same-origin
    # The click starts a navigation and returns at once: wait for it to land.
    WebDriverWait(driver, 10).until(lambda d: urlsplit(d.current_url).path == "/dashboard/login")
    driver.get(f"{base}/dashboard/nodes")
    assert urlsplit(driver.current_url).path == "/dashboard/login"  # the cookie is gone


async def test_dashboard_pages_in_chromium(tmp_path: Path, profile: Profile, browser: Any) -> None:
    """Nodes, round, node and flag pages show the run's verdicts and rendered SVG plots."""
    engine = FakeEngine(profile)
    honest = EngineWorker(engine)  # type: ignore[arg-type]
    workers: dict[str, Any] = {
        "honest-1": honest,
        "honest-2": honest,
        "made-up": MadeUpWorker(dict(engine.fingerprint), profile.max_new_tokens),
        "late": EmulatedWorker(honest, EmulatedGPU(1.5)),
    }
    want = {"honest-1": "pass", "honest-2": "pass", "made-up": "wrong-answer", "late": "late"}
    async with web_coordinator(tmp_path, [profile]) as rc:
        build_references(profile, engine, rc.coord.store, 64, seed=1)
        expected: dict[str, str] = {}
        for name, w in workers.items():
            client = rc.node(w, profile.name, label=name)
            rc.start(client)
            expected[public_key_text(client.identity)] = want[name]
        await rc.wait_connected(len(workers))
        reports = [await run_round(rc.coord, profile.name) for _ in range(ROUNDS)]
        for report in reports:
            assert {o.node_key: str(o.verdict) for o in report.outcomes} == expected
        pair = sorted(k for k, v in expected.items() if v in ("late", "pass"))[:2]
        flag_id = FlagStore(rc.coord.store).add_flag(
            "shared-backend", "confirmed", profile.name, pair, 7.5, 3.0,
            {"rule": "test flag", "rounds": [r.round_id for r in reports]},
        )  # fmt: skip
        base = f"http://127.0.0.1:{rc.port}"
        token = rc.coord.config.admin_token
        await asyncio.to_thread(
            check_pages, browser, base, token, expected, reports[-1].round_id, flag_id
        )
        async with (
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
            http.get(f"{base}/dashboard/flags/{flag_id}/receipts.json") as resp,
        ):
            assert resp.status == 200
            receipts = (await resp.json())["receipts"]
        assert {r["node_key"] for r in receipts} == set(pair)
        assert len(receipts) == ROUNDS * len(pair)
        assert all(r["signature"] and r["outputs"] for r in receipts)
