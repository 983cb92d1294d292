"""``netcheck gateway serve``: one gateway of a multi-gateway deployment."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click


@click.group()
def gateway() -> None:
    """Run a gateway: one of several coordinator processes sharing PostgreSQL."""


@gateway.command("serve")
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path), default="configs/gateway.toml",
    show_default=True, help="Gateway config (a coordinator config plus gateway_id).",
)  # fmt: skip
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def gateway_serve(config_path: Path, verbose: bool) -> None:
    """Serve nodes and take part in (or lead) rounds until interrupted."""
    from netcheck.cli import setup_logging
    from netcheck.gateway.app import serve

    setup_logging(verbose, "gateway")
    asyncio.run(serve(config_path))
