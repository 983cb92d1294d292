"""netcheck.lab.demo_report: the demo's closing overrun count says what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from netcheck.lab.demo_report import report_overruns


def test_overruns_name_the_load_and_what_to_do(tmp_path: Path) -> None:
    """Overrun batches are counted per node, and the line says to rerun on an idle host
    with the load average now; no overrun prints nothing."""
    (tmp_path / "honest-1.log").write_text("x EMULATION OVERRUN y\nEMULATION OVERRUN\n")
    (tmp_path / "made-up.log").write_text("fine\n")
    console = Console(record=True, width=400)
    assert report_overruns(console, tmp_path, ["honest-1", "made-up"]) == 2
    text = " ".join(console.export_text().split())
    assert "EMULATION OVERRUN in 2 batches (honest-1 2)" in text
    assert "run the demo again on an idle host (load average now" in text
    quiet = Console(record=True, width=400)
    assert report_overruns(quiet, tmp_path, ["made-up"]) == 0
    assert quiet.export_text() == ""


def test_a_round_is_void_only_for_an_honest_node_late_after_an_overrun(tmp_path: Path) -> None:
    """An honest node failing on time *and* logging an EMULATION OVERRUN during the round
    voids it (the host, not the method, was timed); a late honest node without an overrun,
    a late cheater, or an overrun with a pass does not."""
    from netcheck.lab.demo_report import overrun_counts, starved_nodes

    names = {"k1": "honest-1", "k2": "honest-2", "k3": "proxy-a"}
    honest = ["honest-1", "honest-2"]
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "honest-1.log").write_text("x EMULATION OVERRUN: real compute took 3 s\n")
    assert overrun_counts(logs, [*honest, "proxy-a"]) == {
        "honest-1": 1,
        "honest-2": 0,
        "proxy-a": 0,
    }
    before = {"honest-1": 0, "honest-2": 0}
    after = {"honest-1": 1, "honest-2": 0, "proxy-a": 5}

    def report(**verdicts: str) -> dict[str, Any]:
        key = {v: k for k, v in names.items()}
        return {"verdicts": [{"node_key": key[n.replace("_", "-")], "verdict": v}
                             for n, v in verdicts.items()]}  # fmt: skip

    assert starved_nodes(
        report(honest_1="late", honest_2="pass"), names, honest, before, after
    ) == ["honest-1"]
    assert starved_nodes(report(honest_1="missing"), names, honest, before, after) == ["honest-1"]
    assert starved_nodes(report(honest_2="late"), names, honest, before, after) == []  # no overrun
    assert starved_nodes(report(honest_1="pass"), names, honest, before, after) == []
    assert starved_nodes(report(honest_1="wrong-answer"), names, honest, before, after) == []
    assert starved_nodes(report(proxy_a="late"), names, honest, before, after) == []  # a cheater


def test_summary_tells_a_starved_host_from_a_false_alarm_and_an_escape() -> None:
    """Honest nodes late only in rounds where they were starved: "host too busy" (HOST TOO
    BUSY, not FALSE ALARM); late in another round: "failed"; a cheater that passed a round
    is "failed" whatever the host did."""
    from netcheck.lab.demo import NODES
    from netcheck.lab.demo_report import HOST_BUSY, summarize

    names = {f"k-{n.name}": n.name for n in NODES}

    def rnd(**over: str) -> dict[str, Any]:
        return {"verdicts": [
            {"node_key": k, "verdict": over.get(n.replace("-", "_"),
                                                "pass" if NODES[i].adversary is None else "late")}
            for i, (k, n) in enumerate(names.items())
        ]}  # fmt: skip

    def run(reports: list[dict[str, Any]], starved: list[set[str]]) -> tuple[str, str]:
        console = Console(record=True, width=200)
        outcome = summarize(console, NODES, reports, names, starved)
        return outcome, console.export_text()

    assert run([rnd(), rnd()], [set(), set()])[0] == "ok"
    outcome, text = run([rnd(honest_1="late"), rnd()], [{"honest-1"}, set()])
    assert outcome == HOST_BUSY and "HOST TOO BUSY" in text and "FALSE ALARM" not in text
    outcome, text = run([rnd(), rnd(honest_1="late")], [{"honest-1"}, set()])
    assert outcome == "failed" and "FALSE ALARM" in text  # late where not starved
    assert run([rnd(honest_1="late", made_up="pass")], [{"honest-1"}])[0] == "failed"


def test_a_void_round_is_named_and_said_to_stay_in_the_database() -> None:
    """The void line names the round's id and says it stays stored (``round list``
    shows it after the demo, its late verdicts among the evidence of a capacity flag):
    a newcomer reviewing the demo's database could not tell the void rounds from the
    counted ones. Checked to fail before the change (no ``void_line``)."""
    from netcheck.lab.demo_report import void_line

    line = void_line(1, "r20261202T233519-57ee65", ["honest-1", "honest-2"], 1, 2)
    text = Text.from_markup(line).plain
    assert text.startswith("round 1 void (EMULATION): honest-1, honest-2 failed on time")
    assert "running it again (1/2)" in text
    assert "r20261202T233519-57ee65 stays in the database (`round list`" in text
