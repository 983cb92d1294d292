"""Operator commands for detection: ``netcheck screen run`` and ``netcheck flags ...``.

Two click groups, registered on the main command by ``netcheck/cli.py``
(``main.add_command(screen)``, ``main.add_command(flags)``). They talk to a running
coordinator through its admin API (:func:`netcheck.admin_client.admin_request`):

- ``netcheck screen run [--rounds N] [--profile P] [--json]`` -> ``POST /admin/screening``
- ``netcheck flags list [--kind K] [--status S] [--node KEY] [--json]`` -> ``GET /admin/flags``
- ``netcheck flags show ID [--json]`` -> ``GET /admin/flags/ID``
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from netcheck.admin_client import admin_call, coordinator_config_option

STATUS_STYLE = {"confirmed": "red", "pending": "yellow", "cleared": "green"}

_json_option = click.option("--json", "as_json", is_flag=True, help="Print raw JSON.")


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _status(status: str) -> str:
    style = STATUS_STYLE.get(status, "white")
    return f"[{style}]{status}[/{style}]"


def flags_table(rows: list[Mapping[str, Any]], title: str = "flags") -> Table:
    """A rich table of flag rows (as ``GET /admin/flags`` returns them)."""
    table = Table(title=title)
    for col in ("id", "kind", "status", "nodes", "statistic", "threshold", "created"):
        table.add_column(col)
    for f in rows:
        table.add_row(
            str(f["flag_id"]),
            f["kind"],
            _status(f["status"]),
            "\n".join(k[:28] for k in f["node_keys"]),
            _num(f.get("statistic")),
            _num(f.get("threshold")),
            _when(f.get("created_at")),
        )
    return table


@click.group("screen")
def screen() -> None:
    """Screening for proxied nodes and shared backends (timing correlation)."""


@screen.command("run")
@coordinator_config_option
@click.option(
    "--rounds",
    default=16,
    show_default=True,
    help="Rounds to run in total; every n-th is a full-load round (n = screening_full_every "
    "in the coordinator config, default 4), the others are screening rounds.",
)
@click.option("--profile", "profile_name", default=None, help="Profile (default: first).")
@click.option(
    "--override-capacity",
    "override",
    metavar="REASON",
    default=None,
    help="Run even if the profile's capacity margin is below 1.2 or unmeasured (it then "
    "cannot tell two identities on one card apart); REASON is recorded with every round.",
)
@_json_option
def screen_run(
    config_path: Path,
    rounds: int,
    profile_name: str | None,
    override: str | None,
    as_json: bool,
) -> None:
    """Run screening rounds now, then the analysis and confirmation rounds; print flags.

    Refused for a profile that cannot tell two identities on one card apart, unless
    --override-capacity gives a reason."""
    body: dict[str, Any] = {"rounds": rounds, "profile": profile_name, "check_capacity": True}
    if override is not None:
        body["capacity_override"] = override
    report = admin_call(config_path, "POST", "/admin/screening", body)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    console = Console()
    kinds = [r["kind"] for r in report.get("rounds", [])]
    console.print(
        f"profile {report['profile']}: {kinds.count('screening')} screening and "
        f"{kinds.count('full')} full-load rounds run"
    )
    analysis = report.get("analysis")
    if analysis:
        console.print(
            f"analysis over {analysis['n_nodes']} nodes x {analysis['n_rounds']} rounds: "
            f"{len(analysis['edges'])} edges, {len(analysis['groups'])} suspect groups "
            f"(Bonferroni p < {analysis['p_crit']:.3g})"
        )
    for c in report.get("confirmations", []):
        members = ", ".join(m[:20] for m in c["group"])
        console.print(f"  suspect group [{members}]: {c['verdict']}")
    console.print(flags_table(report.get("flags", []), "flags raised"))


@click.group("flags")
def flags() -> None:
    """Flags raised against nodes, with the evidence to re-check them."""


@flags.command("list")
@coordinator_config_option
@click.option("--kind", default=None, help="shared-backend, capacity, result-sharing, relay.")
@click.option("--status", default=None, help="confirmed, pending or cleared.")
@click.option("--node", "node_key", default=None, help="Only flags naming this node key.")
@_json_option
def flags_list(
    config_path: Path, kind: str | None, status: str | None, node_key: str | None, as_json: bool
) -> None:
    """List flags, newest first."""
    from urllib.parse import urlencode

    params = {k: v for k, v in (("kind", kind), ("status", status), ("node", node_key)) if v}
    path = "/admin/flags" + (f"?{urlencode(params)}" if params else "")
    data = admin_call(config_path, "GET", path)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        Console().print(flags_table(data["flags"]))


@flags.command("show")
@coordinator_config_option
@click.argument("flag_id", type=int)
@_json_option
def flags_show(config_path: Path, flag_id: int, as_json: bool) -> None:
    """Show one flag with its evidence (rounds, schedule bits, latencies, receipts)."""
    flag = admin_call(config_path, "GET", f"/admin/flags/{flag_id}")
    if as_json:
        click.echo(json.dumps(flag, indent=2))
        return
    console = Console()
    console.print(flags_table([flag], f"flag {flag_id}"))
    ev = flag.get("evidence", {})
    if "rule" in ev:
        console.print(f"rule: {ev['rule']}")
    for section in ("screening", "confirmation"):
        part = ev.get(section)
        if isinstance(part, dict):
            console.print(f"{section}: {len(part.get('rounds', []))} rounds")
    if section_members := ev.get("confirmation", {}).get("members"):
        table = Table(title="confirmation per member")
        for col in ("node", "co-loaded", "alone", "slowdown", "t", "p", "confirmed"):
            table.add_column(col)
        for m in section_members:
            table.add_row(
                m["node_key"][:28], str(m["n_coloaded"]), str(m["n_alone"]),
                _num(m.get("slowdown")), _num(m.get("t")), _num(m.get("p")),
                "yes" if m["confirmed"] else "no",
            )  # fmt: skip
        console.print(table)
    console.print(f"receipts: {len(ev.get('receipts', []))} (session id, commitment, signature)")
    console.print("full evidence: netcheck flags show --json " + str(flag_id))
