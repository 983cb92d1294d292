"""``netcheck node status``: the verdicts this node was sent, from its verdict log.

``netcheck node run --config node.toml`` appends every signed verdict notice to
``<config folder>/<config stem>.verdicts.jsonl`` (:mod:`netcheck.node.verdicts`); this
command prints the most recent ones with each signature re-checked against the pinned
coordinator key.
"""

from __future__ import annotations

import json
import math
import shlex
from datetime import UTC, datetime
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text


@click.command("status")
@click.option(
    "--config",
    "config_path",
    default="configs/node.toml",
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Node config file (its verdict log lies next to it).",
)
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Show the most recent this many verdicts.",
)
@click.option("--json", "as_json", is_flag=True, help="Print raw JSON.")
def node_status(config_path: Path, limit: int, as_json: bool) -> None:
    """Show this node's recent verdicts (as the coordinator signed them)."""
    from netcheck.admin_client import invoked_as
    from netcheck.config import load_node_config
    from netcheck.errors import ConfigError
    from netcheck.keys import parse_public_key
    from netcheck.node.verdicts import check_line, default_log_path, read
    from netcheck.report import console, verdict_text

    cfg = load_node_config(config_path)
    coordinator_key = parse_public_key(cfg.coordinator_key)
    path = default_log_path(config_path)
    try:
        entries = read(path, limit)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the verdict log: {exc.strerror or exc}") from None
    for e in entries:
        e["signature_ok"] = check_line(e, coordinator_key)
    if as_json:
        click.echo(json.dumps({"log": str(path), "verdicts": entries}, indent=2))
        return
    out = console()
    if not entries:
        out.print(Text(f"no verdicts yet in {path}: run `{invoked_as()} node run --config "
                       f"{shlex.quote(str(config_path))}` and wait for a round"))  # fmt: skip
        return
    passed = sum(1 for e in entries if e.get("verdict") == "pass")
    checked = sum(1 for e in entries if e.get("verdict") != "unchecked")
    table = Table(title=f"last {len(entries)} verdicts ({passed} of {checked} checked passed)")
    for col in (
        "received (UTC)",
        "round",
        "verdict",
        "elapsed s",
        "deadline s",
        "signed",
        "reason",
    ):
        table.add_column(col)
    for e in entries:
        table.add_row(
            _when(e.get("received_at")), Text(str(e.get("round_id"))),
            verdict_text(str(e.get("verdict"))),
            _seconds(e.get("elapsed_s")), _seconds(e.get("deadline_s")),
            "[green]ok[/green]" if e["signature_ok"] else "[red]BAD[/red]",
            Text(str(e.get("reason", ""))),
        )  # fmt: skip
    out.print(table)


def _number(value: object) -> float | None:
    """``value`` as a finite float, or None (a damaged or hand-edited log line)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _when(value: object) -> str:
    """A log line's ``received_at`` (Unix seconds) as UTC ISO time; ``?`` if unusable."""
    seconds = _number(value)
    try:
        return (
            "?"
            if seconds is None
            else datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")
        )
    except (OverflowError, OSError, ValueError):  # out of the platform's range
        return "?"


def _seconds(value: object) -> str:
    """``elapsed_s``/``deadline_s``: ``-`` when not measured (null), ``?`` if unusable."""
    seconds = _number(value)
    return "-" if value is None else "?" if seconds is None else f"{seconds:.3f}"


@click.command("setup")
@click.option(
    "--cards", type=click.IntRange(1, 64), required=True, help="Cards (GPUs) on this host."
)
@click.option("--host", default=None, help="Host name in node names (default: this machine's).")
@click.option(
    "--out", "out_dir", default="configs", show_default=True,
    type=click.Path(file_okay=False, path_type=Path), help="Folder for the configs (keys in keys/).",
)  # fmt: skip
@click.option("--coordinator-url", required=True, help="ws(s)://host:port/v1/ws")
@click.option(
    "--coordinator-key", required=True, help="The coordinator's public key (ed25519:...)."
)
@click.option("--profile", "profile_name", required=True, help="Profile every card claims.")
@click.option(
    "--first-card",
    default=0,
    show_default=True,
    type=click.IntRange(0, 63),
    help="Index of the first card: configs for cuda:FIRST .. cuda:FIRST+CARDS-1.",
)
def node_setup(
    cards: int, host: str | None, out_dir: Path, coordinator_url: str,
    coordinator_key: str, profile_name: str, first_card: int,
) -> None:  # fmt: skip
    """Set up one node identity per card: a key and a config each (device cuda:N).

    Prints the lines the coordinator's operator adds to coordinator.toml
    (allowed_nodes, node_names, and node_hosts declaring that these identities share
    this host). Start each with `netcheck node run --config FILE`. Each written config
    is loaded back (coordinator URL and key, profile found): on an error nothing is left
    written.
    """
    import socket

    from netcheck.admin_client import invoked_as
    from netcheck.config import load_node_config
    from netcheck.node.setup import coordinator_snippet, setup_cards

    host = host or socket.gethostname().split(".")[0]
    nodes = setup_cards(
        out_dir, host, cards,
        coordinator_url=coordinator_url, coordinator_key=coordinator_key,
        profile=profile_name, first_card=first_card,
    )  # fmt: skip
    for n in nodes:
        click.echo(f"{n.name}: {n.device}, {n.config_path}, key {n.public_key}")
    first = nodes[0].config_path
    cfg = load_node_config(first)
    if cfg.load_profile(cfg.profile).device == "cpu":
        click.echo(
            f"note: profile {profile_name} runs on the CPU (its device is cpu); these configs "
            "set device cuda:N, one card each. A CPU node needs no setup per card: one "
            "config like configs/node.toml, without a device line."
        )
    prog = invoked_as()
    click.echo(
        f"next: send the lines below to the coordinator's operator; once they are in its "
        f"config, check each card's node with `{prog} doctor --config {first}` and start "
        f"it with `{prog} node run --config {first}` (likewise for the other configs)"
    )
    click.echo("\n# for the coordinator operator (coordinator.toml):")
    click.echo(
        "# allowed_nodes replaces the config's own allowed_nodes line (TOML refuses a key\n"
        "# given twice: 'Cannot overwrite a value'); the [tables] go at the end of the file;\n"
        "# with every node listed, set open_enrollment = false"
    )
    click.echo(coordinator_snippet(nodes, host))
