"""Terminal tables for operators (rich): round verdicts and node lists."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def console() -> Console:
    """A console for tables: the terminal's width, or 120 columns when piped to a file."""
    probe = Console()
    return probe if probe.is_terminal else Console(width=120)


VERDICT_STYLE = {"pass": "green", "late": "yellow", "profile-mismatch": "magenta"}


def verdict_text(verdict: str) -> str:
    """A verdict coloured for the terminal (green pass, red failures)."""
    style = VERDICT_STYLE.get(verdict, "red")
    return f"[{style}]{verdict}[/{style}]"


def print_round(report: Mapping[str, Any], names: Mapping[str, str] | None = None) -> None:
    """Print one round's verdict table and phase timings.

    Args:
        report: the admin API's round report (``RoundReport.as_dict()``).
        names: optional node key → display name.
    """
    names = dict(names or {})
    for v in report["verdicts"]:
        if v.get("name"):
            names.setdefault(v["node_key"], v["name"])
    table = Table(title=f"round {report['round_id']} ({report['profile']})")
    for col in ("node", "verdict", "elapsed s", "canaries", "reason"):
        table.add_column(col)
    for v in sorted(report["verdicts"], key=lambda v: names.get(v["node_key"], v["node_key"])):
        elapsed = v.get("elapsed_s")
        table.add_row(
            names.get(v["node_key"], v["node_key"][:20]),
            verdict_text(v["verdict"]),
            "-" if elapsed is None else f"{elapsed:.3f}",
            f"{v['canaries_matched']}/{v['canaries_checked']}",
            Text(v["reason"]),  # may hold node text: never parsed as rich markup
        )
    out = console()
    out.print(table)
    phases = report.get("phases", {})
    if phases:
        out.print(
            "  phases: "
            + ", ".join(f"{k.removesuffix('_s')} {val * 1000:.1f} ms" for k, val in phases.items())
        )


def print_nodes(data: Mapping[str, Any]) -> None:
    """Print the connected nodes from ``GET /admin/nodes``."""
    table = Table(title=f"{len(data['connected'])} connected node(s)")
    for col in ("name", "node key", "profile", "fingerprint", "rtt ms", "peer"):
        table.add_column(col)
    for n in data["connected"]:
        rtt = n.get("rtt_s")
        table.add_row(
            n.get("name") or "-",
            n["node_key"],
            n["profile"],
            n["fingerprint_id"][:12],
            "-" if rtt is None else f"{rtt * 1000:.2f}",
            n["peer"],
        )
    console().print(table)
