"""A node whose answers fail round after round gets one ``answer-failure`` flag that
collects the later failures, with links to its evidence rounds in the admin API, the
CLI and the dashboard (Chromium).

A real coordinator on loopback, a node client with the real handshake whose worker makes
up tokens (every checked round ends ``wrong-answer``), SQLite, the CLI over HTTP.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from click.testing import CliRunner
from test_pool_surfaces import NODE_FP, PROFILE, get, write_config

from netcheck.cli import main
from netcheck.coordinator.rounds import run_round
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import canary_store, running_coordinator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from web_support import CHROMEDRIVER, CHROMIUM, chrome_driver  # noqa: E402


def check_pages(driver: Any, base: str, token: str, fid: int, rounds: list[str]) -> None:
    driver.get(f"{base}/dashboard/flags?token={quote(token)}")
    row = driver.find_element("css selector", f"tr[data-flag='{fid}']")
    assert "answer-failure" in row.text
    driver.get(f"{base}/dashboard/flags/{fid}")
    links = driver.find_elements("css selector", "#evidence-rounds a")
    assert sorted(a.text for a in links) == sorted(rounds)
    for a in links:
        assert a.get_attribute("href").endswith(f"/dashboard/rounds/{quote(a.text)}")
    body = driver.find_element("tag name", "body").text
    assert "failed the canary check" in body and "Detector" not in body
    assert driver.find_element("id", "no-pair-plots")  # one node: no 1x1 matrix, no r = 1.00
    assert not driver.find_elements("id", "corr-plot")
    assert driver.find_element("id", "loaded-title").text == "Service times in the evidence rounds"


async def test_failing_node_gets_one_answer_failure_flag_with_evidence_links(
    tmp_path: Path,
) -> None:
    """2 failures in 3 checked rounds raise the flag; 6 failing rounds still make one flag."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, NODE_FP, 12, answer=range(4))
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        update = {"answer_failure_window": 3, "answer_failure_strikes": 2}
        rc.coord.screening.config = rc.coord.config.model_copy(update=update)
        rc.start(rc.node(MadeUpWorker(NODE_FP, PROFILE.max_new_tokens), PROFILE.name))
        await rc.wait_connected(1)
        first = [await run_round(rc.coord, PROFILE.name) for _ in range(2)]
        assert first[0].flags == [] and len(first[1].flags) == 1
        fid = first[1].flags[0]
        later = [await run_round(rc.coord, PROFILE.name) for _ in range(4)]
        assert {f for r in later for f in r.flags} <= {fid}  # repeats join the open flag
        listed = await get(rc, "/admin/flags?kind=answer-failure")
        assert [f["flag_id"] for f in listed["flags"]] == [fid]
        flag = await get(rc, f"/admin/flags/{fid}")
        all_ids = [r.round_id for r in first + later]
        # raised on rounds 1-2; round 5 is the first whose window (3-5) is not covered
        # yet, so its failures join the open flag; round 6's window overlaps again
        assert set(flag["evidence"]["failure_rounds"]) == set(all_ids[:5])  # accumulated
        assert [len(o["rounds"]) for o in flag["evidence"]["occurrences"]] == [2, 3]
        rounds = [r["round_id"] for r in flag["evidence_rounds"]]
        assert set(rounds) == set(all_ids[:5])
        one = flag["evidence_rounds"][0]
        assert one["admin"] == f"/admin/rounds/{one['round_id']}"
        assert one["dashboard"] == f"/dashboard/rounds/{one['round_id']}"
        assert flag["rule"].startswith("The node's answers failed the canary check")
        cfg = str(write_config(tmp_path, rc))
        shown = await asyncio.to_thread(
            CliRunner().invoke, main, ["flags", "show", str(fid), "--config", cfg],
            terminal_width=200,
        )  # fmt: skip
        assert shown.exit_code == 0, shown.output
        assert f"evidence rounds: {len(rounds)}" in shown.output and rounds[0] in shown.output
        assert "seen 2 times" in shown.output
        raw = json.loads(
            (await asyncio.to_thread(
                CliRunner().invoke, main, ["flags", "show", str(fid), "--config", cfg, "--json"]
            )).output
        )  # fmt: skip
        assert raw["links"]["dashboard"] == f"/dashboard/flags/{fid}"
        key = raw["node_keys"][0]  # the operator's name for the node, on every flags surface
        rc.coord.config = rc.coord.config.model_copy(update={"node_names": {key: "rack7-gpu0"}})
        listed = await get(rc, "/admin/flags")
        assert listed["flags"][0]["node_names"] == ["rack7-gpu0"]
        table = await asyncio.to_thread(
            CliRunner().invoke, main, ["flags", "list", "--config", cfg], terminal_width=250
        )
        assert f"rack7-gpu0 ({key})" in table.output, table.output
        if shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER):
            driver = chrome_driver()
            try:
                await asyncio.to_thread(
                    check_pages, driver, f"http://127.0.0.1:{rc.port}",
                    rc.coord.config.admin_token, fid, rounds,
                )  # fmt: skip
            finally:
                driver.quit()
