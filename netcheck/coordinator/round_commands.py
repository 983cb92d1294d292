"""``netcheck round list`` and ``netcheck round show``: stored rounds through the admin API.

- ``netcheck round list [--limit N] [--offset K] [--json]`` -> ``GET /admin/rounds``
- ``netcheck round show ROUND_ID [--json]`` -> ``GET /admin/rounds/ROUND_ID``
"""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlencode

import click
from rich.table import Table
from rich.text import Text

from netcheck.admin_client import (
    AdminNotFound,
    admin_call,
    coordinator_config_option,
    coordinator_label,
    invoked_as,
)


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


@click.command("list")
@coordinator_config_option
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000),
              help="Show this many rounds (newest first).")  # fmt: skip
@click.option("--offset", default=0, show_default=True, type=click.IntRange(0, None),
              help="Skip this many newer rounds.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print raw JSON.")
def round_list(config_path: Path, limit: int, offset: int, as_json: bool) -> None:
    """List stored rounds, newest first, with their verdict counts."""
    from netcheck.report import console, verdict_text

    path = "/admin/rounds?" + urlencode({"limit": limit, "offset": offset})
    data = admin_call(config_path, "GET", path, timeout_s=60)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    shown = len(data["rounds"])
    if not shown:
        where = coordinator_label(config_path)
        click.echo(
            f"no rounds stored on {where}; run one with `{invoked_as()} round run --config "
            f"{shlex.quote(str(config_path))}`"
            if not data["total"]
            else f"no rounds after the newest {offset}: {where} stores {data['total']}"
        )
        return
    table = Table(title=f"rounds {offset + 1 if shown else 0}-{offset + shown} of {data['total']}")
    for col in ("round", "profile", "started (UTC)", "status", "verdicts"):
        table.add_column(col)
    for r in data["rounds"]:
        counts = ", ".join(f"{verdict_text(v)} {n}" for v, n in r.get("counts", {}).items())
        table.add_row(
            Text(r["round_id"]), Text(r["profile"]),
            _when(r.get("started_at")), Text(r["status"]), counts or "-",
        )  # fmt: skip
    console().print(table)


@click.command("show")
@coordinator_config_option
@click.argument("round_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print raw JSON.")
def round_show(config_path: Path, round_id: str | None, as_json: bool) -> None:
    """Show one stored round: its verdicts and phase timings (exit 7 if unknown).

    Round ids look like r20261130T182800-ec2a70; netcheck round list shows them.
    """
    from netcheck.report import print_round

    config = shlex.quote(str(config_path))
    hint = f"list the stored rounds with: {invoked_as()} round list --config {config}"
    if not round_id:
        raise click.UsageError(f"give a ROUND_ID; {hint}")
    try:
        data = admin_call(
            config_path, "GET", f"/admin/rounds/{quote(round_id, safe='')}", timeout_s=60
        )
    except AdminNotFound as exc:
        raise AdminNotFound(f"{exc}; {hint}") from None
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    print_round({**data, "phases": data.get("summary") or {}})
