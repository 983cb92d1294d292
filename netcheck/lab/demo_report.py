"""``netcheck demo``'s closing report: the verdict table per node and round, and the
count of batches whose real compute outlasted the emulated GPU."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from netcheck.lab.demo_sizing import host_cores, load_average
from netcheck.report import verdict_text


def report_overruns(console: Console, logs: Path, names: Iterable[str]) -> int:
    """Print how many batches overran the emulated GPU (``EMULATION OVERRUN`` lines in the
    node logs ``logs/<name>.log``, :class:`netcheck.lab.emulation.EmulatedWorker`);
    returns that count."""
    counts = {
        name: (logs / f"{name}.log").read_text(errors="replace").count("EMULATION OVERRUN")
        for name in names
    }
    total = sum(counts.values())
    if total:
        where = ", ".join(f"{n} {c}" for n, c in sorted(counts.items()) if c)
        console.print(
            f"[yellow]EMULATION OVERRUN[/yellow] in {total} "
            f"{'batch' if total == 1 else 'batches'} ({where}): real compute "
            "on this machine outlasted the emulated GPU, so those timings show the host CPU "
            "(too slow or too busy), not the emulated GPU. Where that made an honest node or "
            f"the proxy pair fail, run the demo again on an idle host (load average now "
            f"{load_average()} on {host_cores()} CPUs; `uptime` shows it)"
        )
    return total


def summarize(
    console: Console, nodes: Sequence[Any], reports: list[dict[str, Any]], names: dict[str, str]
) -> bool:
    """Print the per-node summary of the demo's ``nodes`` (``name``, ``role``,
    ``adversary``); True when honest nodes passed and cheaters failed."""
    by_name = {n.name: n for n in nodes}
    table = Table(title="demo summary: verdict per round")
    table.add_column("node")
    table.add_column("role")
    for i in range(len(reports)):
        table.add_column(f"round {i + 1}")
    table.add_column("outcome")
    ok_all = True
    for key, name in sorted(names.items(), key=lambda kv: kv[1]):
        verdicts = []
        for rep in reports:
            v = next((v["verdict"] for v in rep["verdicts"] if v["node_key"] == key), "absent")
            verdicts.append(v)
        node = by_name[name]
        if node.adversary is None:
            ok = all(v == "pass" for v in verdicts)
            outcome = "[green]passed as expected[/green]" if ok else "[red]FALSE ALARM[/red]"
        else:
            ok = all(v != "pass" for v in verdicts)
            outcome = "[green]caught every round[/green]" if ok else "[red]ESCAPED a round[/red]"
        ok_all &= ok
        table.add_row(name, node.role, *(verdict_text(v) for v in verdicts), outcome)
    console.print(table)
    return ok_all
