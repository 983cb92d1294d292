"""``netcheck demo``'s closing report: the verdict table per node and round, and the
count of batches whose real compute outlasted the emulated GPU."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
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


def overrun_counts(logs: Path, names: Iterable[str]) -> dict[str, int]:
    """``EMULATION OVERRUN`` lines so far in each node log ``logs/<name>.log`` (0 for a
    log not written yet)."""
    counts = {}
    for name in names:
        path = logs / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        counts[name] = text.count("EMULATION OVERRUN")
    return counts


TIMING_VERDICTS = frozenset({"late", "missing"})


def starved_nodes(
    report: dict[str, Any],
    names: dict[str, str],
    honest: Iterable[str],
    before: dict[str, int],
    after: dict[str, int],
) -> list[str]:
    """Honest nodes that failed a round on time (``late``/``missing``) *and* logged an
    ``EMULATION OVERRUN`` during it (``after`` > ``before``, :func:`overrun_counts`): their
    real compute on this host's CPU outlasted the emulated GPU, so the round timed the
    host, not the method, and the demo re-runs it. A late honest node without an overrun
    is not excused."""
    honest_set = set(honest)
    out = []
    for v in report["verdicts"]:
        name = names.get(v["node_key"], v["node_key"])
        if (
            name in honest_set
            and v["verdict"] in TIMING_VERDICTS
            and after.get(name, 0) > before.get(name, 0)
        ):
            out.append(name)
    return sorted(out)


def void_line(number: int, round_id: str, starved: Sequence[str], rerun: int, most: int) -> str:
    """The demo's line for round ``number`` (1-based, id ``round_id``) made void because
    the honest nodes ``starved`` failed on time after an overrun (:func:`starved_nodes`),
    re-run as the ``rerun``-th of ``most``. It names the round: the void round stays in
    the database (``round list``, the dashboard) and its verdicts count like any round's
    (a late verdict there is a capacity strike), so an analyst reading the stored rounds
    afterwards can tell it from the counted ones."""
    return (
        f"[yellow]round {number} void (EMULATION)[/yellow]: {', '.join(starved)} failed on "
        "time after an EMULATION OVERRUN: real compute on this host's CPU outlasted "
        "the emulated GPU (the host got busier since the demo timed it), so the round "
        f"timed the host, not the method; running it again ({rerun}/{most}). {round_id} "
        "stays in the database (`round list`, the dashboard) with its verdicts: the "
        "summary below leaves it out"
    )


HOST_BUSY = "host too busy"
"""What :func:`summarize` returns when the only failures were honest nodes failing on time
in rounds where their real compute outlasted the emulated GPU (:func:`starved_nodes`)."""


def summarize(
    console: Console,
    nodes: Sequence[Any],
    reports: list[dict[str, Any]],
    names: dict[str, str],
    starved: Sequence[Collection[str]] = (),
) -> str:
    """Print the per-node summary of the demo's ``nodes`` (``name``, ``role``,
    ``adversary``); ``starved[i]``: the honest nodes :func:`starved_nodes` named in round
    ``i`` (absent = none). Returns ``"ok"`` when honest nodes passed and cheaters failed
    every round; :data:`HOST_BUSY` when, beyond that, honest nodes failed only in rounds
    where they were starved (outcome ``HOST TOO BUSY``, not ``FALSE ALARM``);
    ``"failed"`` otherwise (a cheater passed a round, or an honest node failed otherwise).
    """
    by_name = {n.name: n for n in nodes}
    table = Table(title="demo summary: verdict per round")
    table.add_column("node")
    table.add_column("role")
    for i in range(len(reports)):
        table.add_column(f"round {i + 1}")
    table.add_column("outcome")
    failed = busy = False
    for key, name in sorted(names.items(), key=lambda kv: kv[1]):
        verdicts = []
        for rep in reports:
            v = next((v["verdict"] for v in rep["verdicts"] if v["node_key"] == key), "absent")
            verdicts.append(v)
        node = by_name[name]
        if node.adversary is None:
            bad = [i for i, v in enumerate(verdicts) if v != "pass"]
            if not bad:
                outcome = "[green]passed as expected[/green]"
            elif all(i < len(starved) and name in starved[i] for i in bad):
                outcome = "[yellow]HOST TOO BUSY[/yellow]"
                busy = True
            else:
                outcome = "[red]FALSE ALARM[/red]"
                failed = True
        else:
            ok = all(v != "pass" for v in verdicts)
            outcome = "[green]caught every round[/green]" if ok else "[red]ESCAPED a round[/red]"
            failed |= not ok
        table.add_row(name, node.role, *(verdict_text(v) for v in verdicts), outcome)
    console.print(table)
    return "failed" if failed else HOST_BUSY if busy else "ok"
