"""``netcheck references status``: the canary pool per profile and fingerprint.

Asks the running coordinator (``GET /admin/references``), which also knows how many
nodes draw from each pool; when no coordinator answers, reads the database named in the
coordinator config directly and says that the connected nodes are unknown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from netcheck.admin_client import (
    AdminUnreachable,
    admin_call,
    coordinator_config_option,
    invoked_as,
)

STATE_STYLE = {"ok": "green", "low": "yellow", "empty": "red"}


def pool_table(entries: Sequence[Mapping[str, Any]], title: str) -> Table:
    """A rich table of pool entries (``PoolEntry.as_dict()`` rows)."""
    table = Table(title=title)
    for col in ("profile", "fingerprint", "unspent", "stored", "nodes", "rounds left", "state"):
        table.add_column(col, justify="right" if col in ("unspent", "stored", "nodes") else "left")
    for e in entries:
        table.add_row(
            Text(str(e["profile"])), Text(str(e["fingerprint_id"])[:12]), str(e["unspent"]),
            str(e["total"]), str(e["nodes"]), str(e["rounds_left"]),
            Text(str(e["state"]), style=STATE_STYLE.get(str(e["state"]), "")),
        )  # fmt: skip
    return table


def _offline(config_path: Path) -> list[dict[str, Any]]:
    """The pool read from the config's database, opened read-only (a copy on a read-only
    mount reads too); no database file yet: no references."""
    from netcheck.config import load_coordinator_config
    from netcheck.references.pool import pool_status
    from netcheck.storage import Store
    from netcheck.storage.urls import missing_sqlite_file

    cfg = load_coordinator_config(config_path)
    profiles = {p.name: p for p in map(cfg.load_profile, cfg.profiles)}
    if missing_sqlite_file(cfg.database) is not None:
        return []
    with Store(cfg.database, read_only=True) as store:
        return [e.as_dict() for e in pool_status(store.reference_pool(), profiles)]


@click.command("status")
@coordinator_config_option
@click.option("--json", "as_json", is_flag=True, help="Print raw JSON.")
def references_status(config_path: Path, as_json: bool) -> None:
    """Show the canary pool: unspent references and rounds left per fingerprint.

    A fingerprint with no unspent reference leaves its nodes unchecked; the command
    that builds more is printed under the table.
    """
    from netcheck.references.pool import build_command, with_config
    from netcheck.report import console

    live = True
    try:
        entries = admin_call(config_path, "GET", "/admin/references", timeout_s=30)["references"]
    except AdminUnreachable as exc:
        live = False
        click.echo(f"note: {exc}; reading the database (connected nodes unknown)", err=True)
        entries = _offline(config_path)
    if as_json:
        click.echo(json.dumps({"live": live, "references": entries}, indent=2))
        return
    out = console()
    if not entries:
        command = with_config(build_command("NAME"), config_path, invoked_as())
        out.print(Text(f"no references stored: build them with `{command}`"))
        return
    out.print(pool_table(entries, "canary pool" + ("" if live else " (database only)")))
    for e in entries:
        if e["state"] != "ok":
            what = "empty" if e["state"] == "empty" else f"low ({e['rounds_left']} rounds left)"
            out.print(
                Text(f"{e['profile']} / {str(e['fingerprint_id'])[:12]}: {what}; "
                     f"build more: {with_config(e['build_command'], config_path, invoked_as())}")
            )  # fmt: skip
