"""Declared co-hosting (``node_hosts``): given to detection (a confirmed slowdown inside
one declared host is a ``declared-host`` flag, not a ``shared-backend`` one) and shown
on the dashboard (nodes, node and flag pages, in Chromium)."""

from __future__ import annotations

import asyncio
import math
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import pytest

from netcheck.analysis import evidence as ev
from netcheck.analysis.detector_config import SuspectGroup
from netcheck.config import load_profile
from netcheck.coordinator.group_flags import declared_host
from netcheck.lab.sample import fill_synthetic
from netcheck.lab.testing import RunningCoordinator, running_coordinator, small_profile
from netcheck.records import Flag
from netcheck.storage.flags import FlagStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from web_support import CHROMEDRIVER, CHROMIUM, chrome_driver  # noqa: E402

PROFILE = small_profile("hosts")
A, B, C = "ed25519:" + "A" * 43, "ed25519:" + "B" * 43, "ed25519:" + "C" * 43


def test_declared_host_needs_every_member_on_one_host() -> None:
    """One host for all members: that host; undeclared or different hosts: None."""
    hosts = {A: "rack7", B: "rack7", C: "rack9"}
    assert declared_host([A, B], hosts) == "rack7"
    assert declared_host([A, C], hosts) is None
    assert declared_host([A, "ed25519:other"], hosts) is None


def store_confirmed(rc: RunningCoordinator, members: tuple[str, ...], mp: Any) -> Flag:
    """Store the flags of a confirmation run that confirmed ``members`` (the statistics
    themselves are another module's business and stubbed here)."""
    mp.setattr(ev, "shared_backend_evidence", lambda *a: {"rounds": ["r1"], "receipts": []})
    mp.setattr(ev, "flag_statistic", lambda run, flag: (1e-5, 1e-3))
    group_res = SimpleNamespace(effect_floor=math.log(1.25), members=[], p_threshold=1e-3,
                                confirmed_members=members)  # fmt: skip
    run = SimpleNamespace(flags=[members], group_result=group_res, observations=[], judged=[])
    screening = rc.coord.screening
    [fid] = screening._store_group_flags(  # type: ignore[arg-type]
        PROFILE, SuspectGroup(members, ()), None, None, run, {}
    )
    flag = screening.flags.get_flag(fid)
    assert flag is not None
    return flag


@pytest.mark.parametrize(
    ("hosts", "kind"),
    [({A: "rack7", B: "rack7"}, "declared-host"), ({A: "rack7"}, "shared-backend"),
     ({A: "rack7", B: "rack9"}, "shared-backend")],
)  # fmt: skip
async def test_confirmed_pair_on_one_declared_host_is_reported_as_declared(
    tmp_path: Path, hosts: dict[str, str], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A confirmed pair both declared on rack7: declared-host flag naming the host; a
    pair not declared together: shared-backend (a proxy farm)."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        rc.coord.screening.config = rc.coord.config.model_copy(update={"node_hosts": hosts})
        flag = store_confirmed(rc, (A, B), monkeypatch)
        assert flag.kind == kind and flag.evidence is not None
        assert flag.evidence["declared_hosts"] == hosts
        if kind == "declared-host":
            assert flag.evidence["declared_host"] == "rack7"
            assert "declared to share host rack7" in flag.evidence["rule"]
            assert "not reported as a proxy farm" in flag.evidence["rule"]
        # either kind counts as already flagged: the group is not re-confirmed each time
        assert rc.coord.screening._already_flagged(PROFILE.name, [A, B])


def check_pages(driver: Any, base: str, token: str, a: str, b: str, fid: int) -> None:
    driver.get(f"{base}/dashboard/nodes?token={quote(token)}")
    host_cells = {
        r.get_attribute("data-node"): r.find_element("css selector", "td.host").text
        for r in driver.find_elements("css selector", "table#nodes tbody tr[data-node]")
    }
    assert host_cells[a] == "rack7" and host_cells[b] == "rack7"
    assert set(host_cells.values()) == {"rack7", ""}
    driver.get(f"{base}/dashboard/nodes/{quote(a, safe='')}")
    cell = driver.find_element("id", "node-host")
    assert cell.text.startswith("rack7, shared with ")
    [peer] = cell.find_elements("css selector", "a")
    assert peer.get_attribute("href").endswith("/dashboard/nodes/" + quote(b, safe=""))
    driver.get(f"{base}/dashboard/flags/{fid}")
    hosts = driver.find_element("id", "flag-hosts").text
    assert hosts.count("rack7") == 2
    body = driver.find_element("tag name", "body").text
    assert "declared to share host rack7" in body


async def test_declared_hosts_on_the_dashboard(tmp_path: Path) -> None:
    """Nodes page host column, node page host with its peers, flag page declared hosts."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip("needs Debian's chromium and chromedriver")
    profile = load_profile("cpu-tiny")
    async with running_coordinator(tmp_path, [profile]) as rc:
        fill_synthetic(rc.coord.store, n_rounds=2, n_honest=3, seed=7)
        keys = sorted(n["node_key"] for n in rc.coord.store.list_nodes())
        a, b = keys[:2]
        rc.coord.config = rc.coord.config.model_copy(
            update={"node_hosts": {a: "rack7", b: "rack7"}}
        )
        fid = FlagStore(rc.coord.store).add_flag(
            "declared-host", "confirmed", profile.name, [a, b], 1e-5, 1e-3,
            {"declared_host": "rack7", "rounds": []},
        )  # fmt: skip
        driver = chrome_driver()
        try:
            await asyncio.to_thread(
                check_pages, driver, f"http://127.0.0.1:{rc.port}",
                rc.coord.config.admin_token, a, b, fid,
            )  # fmt: skip
        finally:
            driver.quit()
