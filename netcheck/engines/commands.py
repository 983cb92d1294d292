"""``netcheck engine ...`` commands (click). Registered in ``netcheck.cli`` with
``main.add_command(engine)``.

``netcheck engine selftest --profile NAME [--json PATH] [--quick]`` runs
:func:`netcheck.engines.selftest.run_selftest` on this machine, prints its tables and
exits 1 when repeat determinism or batch-composition invariance failed (2 for a
netcheck error such as a missing model, 0 otherwise).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from netcheck.errors import NetcheckError


@click.group("engine")
def engine() -> None:
    """Check the local inference engine."""


@engine.command("selftest")
@click.option("--profile", "profile_name", required=True, help="Profile name or TOML path.")
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the full report as JSON here.",
)
@click.option(
    "--quick", is_flag=True, help="Fewer batches: 2 repeats, 2 mixes, 1 timed run, 3 sizes."
)
@click.option("--seed", default=4, show_default=True, help="Seed of the generated inputs.")
def selftest(profile_name: str, json_path: Path | None, quick: bool, seed: int) -> None:
    """Check determinism at the profile's batch shape on this machine.

    (a) repeat determinism, (b) batch-composition invariance (probe prompts at several
    positions among other prompts), (c) how many outputs change at other batch sizes
    (reported only), (d) throughput in generated tokens/s around B. Exits 1 if (a) or
    (b) fails.
    """
    from rich.console import Console

    from netcheck.config import load_profile
    from netcheck.engines.selftest import render_report, run_selftest

    console = Console(stderr=False)
    try:
        profile = load_profile(profile_name)
        b = profile.batch_size
        with console.status("running selftest") as status:
            report = run_selftest(
                profile,
                sizes=sorted({max(1, b // 2), 1}) if quick else None,
                throughput_sizes=sorted({max(1, b // 2), b, 2 * b}) if quick else None,
                repeats=2 if quick else 3,
                mixes=2 if quick else 4,
                timing_runs=1 if quick else 2,
                seed=seed,
                progress=status.update,
            )
    except NetcheckError as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(2)
    for table in render_report(report):
        console.print(table)
    verdict = "[green]PASS[/green]" if report.passed else "[red]FAIL[/red]"
    console.print(
        f"selftest {verdict}: fingerprint {report.fingerprint_id[:12]}, {report.wall_s:.1f} s"
    )
    if json_path is not None:
        json_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    sys.exit(0 if report.passed else 1)
