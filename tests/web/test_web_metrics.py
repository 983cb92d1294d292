"""Prometheus metrics: observe_round updates the round metrics; /metrics shows live state."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from web_support import web_coordinator

from netcheck.config import load_profile
from netcheck.records import NodeOutcome, RoundReport, Verdict
from netcheck.web import observe_round
from netcheck.web.metrics import REGISTRY


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_observe_round_counts_rounds_verdicts_and_timings() -> None:
    """One report adds a round, its verdicts by kind, and one skew and duration sample."""
    before = {
        "rounds": _value("netcheck_rounds_total", profile="p-test", status="complete"),
        "late": _value("netcheck_verdicts_total", profile="p-test", verdict="late"),
        "pass": _value("netcheck_verdicts_total", profile="p-test", verdict="pass"),
        "skew": _value("netcheck_release_skew_seconds_count"),
        "dur": _value("netcheck_round_duration_seconds_sum"),
    }
    report = RoundReport(
        "r1", "p-test", "complete",
        [NodeOutcome("a", Verdict.PASS, "", 1.0, 3, 3), NodeOutcome("b", Verdict.PASS, "", 1.0, 3, 3),
         NodeOutcome("c", Verdict.LATE, "", 9.0, 3, 3)],
        {"release_skew_s": 0.0004, "total_s": 2.5},
    )  # fmt: skip
    observe_round(report)
    observe_round(report.as_dict())  # the admin API's JSON form is accepted too
    assert (
        _value("netcheck_rounds_total", profile="p-test", status="complete") == before["rounds"] + 2
    )
    assert _value("netcheck_verdicts_total", profile="p-test", verdict="pass") == before["pass"] + 4
    assert _value("netcheck_verdicts_total", profile="p-test", verdict="late") == before["late"] + 2
    assert _value("netcheck_release_skew_seconds_count") == before["skew"] + 2
    assert _value("netcheck_round_duration_seconds_sum") == before["dur"] + 5.0


async def test_metrics_endpoint_parses_and_shows_live_state(tmp_path: Path) -> None:
    """/metrics is valid exposition text with connected nodes and handshake failures."""
    profile = load_profile("cpu-tiny")
    async with web_coordinator(tmp_path, [profile]) as rc:
        rc.coord.handshake_failures = 3
        rc.coord.slots.refused = 2
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        async with (
            aiohttp.ClientSession(headers=headers) as http,
            http.get(f"http://127.0.0.1:{rc.port}/metrics") as resp,
        ):
            assert resp.status == 200
            text = await resp.text()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert samples[("netcheck_connected_nodes", (("profile", "cpu-tiny"),))] == 0
    assert samples[("netcheck_handshake_failures_total", ())] == 3
    assert samples[("netcheck_sessions_refused_total", ())] == 2
    names = {name for name, _ in samples}
    assert {
        "netcheck_release_skew_seconds_bucket",
        "netcheck_round_duration_seconds_bucket",
    } <= names
