"""The canary-pool banner says whose rounds it counts."""

from __future__ import annotations

import re

from netcheck.config import load_profile
from netcheck.references.pool import pool_status
from netcheck.web.templates import make_env


def banner(connected: dict[tuple[str, str], int]) -> str:
    """The banner's text for a cpu-tiny pool of 10 unspent canaries."""
    profile = load_profile("cpu-tiny")
    rows = [{"profile": "cpu-tiny", "fingerprint_id": "f" * 64, "total": 10, "unspent": 10}]
    pool = pool_status(rows, {"cpu-tiny": profile}, connected)
    page = make_env().get_template("error.html").render(title="t", message="m", pool=pool)
    text = re.sub(r"<[^>]+>", " ", page.split('id="pool-banner"')[1].split("</div>")[0])
    return " ".join(text.split())


def test_with_no_node_connected_the_rounds_are_for_one_node() -> None:
    """No node connected: the figure is one node's rounds (as the CLI says), not "0
    nodes"; with nodes, it is for those nodes."""
    per_node = load_profile("cpu-tiny").canaries_max
    alone = banner({})
    assert f"{10 // per_node} rounds left for one node (10 unspent, no node connected)" in alone
    two = banner({("cpu-tiny", "f" * 64): 2})
    assert f"{10 // (2 * per_node)} round" in two and "(10 unspent, 2 nodes)" in two
    assert "for one node" not in two
