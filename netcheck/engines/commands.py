"""``netcheck engine ...`` commands (click). Registered in ``netcheck.cli`` with
``main.add_command(engine)``.

``netcheck engine pool RECORD.json ...`` pools the calibrations of several cards
(:mod:`netcheck.engines.calibrate_pool`).

``netcheck engine selftest --profile NAME [--json PATH] [--quick]`` runs
:func:`netcheck.engines.selftest.run_selftest` on this machine, prints its tables and
exits 1 when repeat determinism or batch-composition invariance failed (2 for a
netcheck error such as a missing model, 0 otherwise).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from netcheck.errors import NetcheckError

#: Largest calibration record `engine pool` reads (a real one is under 100 KB); a larger
#: file, or an endless one (a device, a pipe), is refused before it fills memory.
MAX_RECORD_BYTES = 64 * 1024 * 1024


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
    from netcheck.admin_client import invoked_as
    from netcheck.capacity import capacity_status

    cap = capacity_status(profile, invoked_as())  # issue 10: say plainly when the profile is unsafe
    console.print(cap.message, style=None if cap.safe else "bold yellow", markup=False)
    if json_path is not None:
        json_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    sys.exit(0 if report.passed else 1)


_OUT_DIR = click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("calibration"),
    show_default=True,
    help="Directory for <profile>.json, <profile>.md and <profile>.tables.toml.",
)
"""``--out`` of ``calibrate`` and ``pool``."""


@engine.command("calibrate")
@click.option("--profile", "profile_name", required=True, help="Profile name or TOML path.")
@_OUT_DIR
@click.option("--batches", default=10, show_default=True, help="Timed single-identity batches.")
@click.option("--trials", default=3, show_default=True, help="Co-location trials per k.")
@click.option("--max-k", default=3, show_default=True, help="Most identities sharing the card.")
@click.option("--no-selftest", is_flag=True, help="Skip the quick selftest.")
@click.option(
    "--rtt-jitter-s",
    default=0.01,
    show_default=True,
    help="Spread of the node network's echo RTT, seconds; the deadline slack is twice it.",
)
@click.option(
    "--max-rtt-s", default=0.05, show_default=True, help="Largest RTT credited to a node, seconds."
)
@click.option(
    "--coupling",
    default=0.2,
    show_default=True,
    type=click.FloatRange(0.0, 1.0, max_open=True),
    help="Benign co-hosting slowdown the deadline allows for (0 <= C < 1): two honest nodes "
    "on one host slow each other by up to 20% when both are loaded, the bound the "
    "detectors allow (docs/detection.md); times measured on a card alone miss it.",
)
@click.option(
    "--update-profile",
    is_flag=True,
    help="Rewrite the profile file's [deadline] and [capacity] tables with the results.",
)
def calibrate(
    profile_name: str,
    out_dir: Path,
    batches: int,
    trials: int,
    max_k: int,
    no_selftest: bool,
    rtt_jitter_s: float,
    max_rtt_s: float,
    coupling: float,
    update_profile: bool,
) -> None:
    """Measure speed and capacity of a profile on this card.

    t_ref and p99 of single-identity batches, the deadline derived from their spread
    (with the --coupling allowance for co-hosted honest nodes),
    then k = 2..max-k identities sharing the card (separate processes started together,
    and k CUDA streams in one process), t(k), beta(k), achieved FLOP/s against the
    measured bf16 matmul peak, and the capacity margin t(2)/deadline. Writes JSON,
    markdown and the profile's [deadline]/[capacity] tables. On a CPU every figure is
    labelled a CPU figure. A t(k) below t(k-1) (timing noise: a busy host) is a warning
    in the output, the markdown and the JSON (t_k_suspect). Exits 1 when the quick
    selftest failed, 2 on an error.
    """
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from netcheck.admin_client import invoked_as
    from netcheck.capacity import capacity_status
    from netcheck.config import load_profile
    from netcheck.engines.calibrate import run_calibration
    from netcheck.engines.calibrate_report import render_markdown, replace_tables, toml_tables

    console = Console(stderr=False)
    command = "netcheck engine calibrate " + " ".join(sys.argv[3:])
    try:
        profile = load_profile(profile_name)
        # Where the results go is checked now: measuring takes minutes on a GPU, and a
        # folder or profile that cannot be written lost them all at the end.
        _check_writable_folder(out_dir)
        if update_profile:
            _check_writable_folder(_profile_path(str(profile_name)).parent)
        with Progress(
            TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console
        ) as bar:
            task = bar.add_task("calibrating", total=1.0)
            result = run_calibration(
                profile,
                batches=batches,
                trials=trials,
                max_k=max_k,
                selftest=not no_selftest,
                rtt_jitter_s=rtt_jitter_s,
                max_rtt_s=max_rtt_s,
                coupling=coupling,
                progress=lambda text, frac: _progress(bar, task, console, text, frac),
            )
    except (NetcheckError, ValueError, OSError) as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(2)
    result["command"] = command
    base = out_dir / profile.name
    markdown = render_markdown(result, command)
    tables = toml_tables(result)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        Path(f"{base}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        Path(f"{base}.md").write_text(markdown, encoding="utf-8")
        Path(f"{base}.tables.toml").write_text(tables, encoding="utf-8")
        console.print(markdown, markup=False, highlight=False, soft_wrap=True)
        for warning in result.get("warnings") or []:
            click.secho(f"warning: {warning}", fg="yellow", err=True)
        if update_profile:
            path = _profile_path(str(profile_name))
            _replace_text(path, replace_tables(path.read_text(encoding="utf-8"), tables))
            console.print(f"updated {path}")
            console.print(capacity_status(load_profile(path), invoked_as()).message, markup=False)
    except OSError as exc:  # a full disk, a folder changed since the start
        click.secho(f"error: results not written: {exc}", fg="red", err=True)
        sys.exit(2)
    sys.exit(1 if result.get("selftest_passed") is False else 0)


def _check_writable_folder(folder: Path) -> None:
    """Create ``folder`` if missing and write a scratch file in it.

    Raises:
        OSError: naming the folder, if it cannot be created or written.
    """
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise OSError(f"{folder}: not a writable folder ({exc.strerror or exc})") from None


def _profile_path(name_or_path: str) -> Path:
    """The profile file ``--update-profile`` rewrites: a name is looked up in the shipped
    profiles folder, a ``.toml`` or a path is taken as it is."""
    from netcheck.config import DEFAULT_PROFILES_DIR

    by_name = not (name_or_path.endswith(".toml") or "/" in name_or_path)
    return DEFAULT_PROFILES_DIR / f"{name_or_path}.toml" if by_name else Path(name_or_path)


@engine.command("pool")
@click.argument("records", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@_OUT_DIR
@click.option(
    "--coupling",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    help="Benign co-hosting slowdown the deadline allows for; default: the records' own "
    "(they must agree).",
)
@click.option(
    "--rtt-jitter-s", type=float, help="RTT jitter, seconds; default: the records' slack / 2."
)
@click.option("--max-rtt-s", type=float, help="Largest RTT credited; default: the records'.")
@click.option(
    "--max-card-gap",
    default=0.10,
    show_default=True,
    type=click.FloatRange(0.0, min_open=True),
    help="Largest distance of one card's median batch time from the median of the card "
    "medians, as a fraction; a card further off is refused.",
)
@click.option(
    "--allow-same-card", is_flag=True, help="Accept two records of the same card (GPU UUID)."
)
@click.option(
    "--slowness-floor",
    default=1.25,
    show_default=True,
    type=click.FloatRange(1.0, min_open=True),
    help="The coordinator's slowness_floor: the report compares the slowest card's median "
    "(with the 20% co-hosting allowance) with it and warns when it does not cover it.",
)
@click.option(
    "--update-profile",
    "update_profile",
    metavar="PROFILE",
    help="Rewrite this profile's [deadline] and [capacity] tables (a name in "
    "configs/profiles, or a TOML path); its batch fields must match the records'.",
)
def pool(
    records: tuple[Path, ...],
    out_dir: Path,
    coupling: float | None,
    rtt_jitter_s: float | None,
    max_rtt_s: float | None,
    max_card_gap: float,
    allow_same_card: bool,
    slowness_floor: float,
    update_profile: str | None,
) -> None:
    """Pool the calibrations of several cards of one class into one deadline.

    `netcheck engine calibrate` measures one trusted card, so cards of the class that
    are slower or noisier than it are not in the deadline. Calibrate each card of the
    class with `netcheck engine calibrate` (each writes RECORD = <profile>.json), then
    pool the records: the deadline is derived from all cards' batch times together,
    and the [capacity] table is taken from the card with the smallest margin t(2)/D at
    that deadline (the fastest card, where a farm would run). Refused (exit 2): records
    of different batch shapes or of CPU and GPU mixed, the same card twice, a card
    whose median is more than --max-card-gap from the others'. The report compares the
    slowest card with the coordinator's slowness_floor (--slowness-floor) and warns when
    the floor does not cover it (a class spread wider than the floor allows: raise
    slowness_floor in the coordinator config). Writes JSON, markdown
    and the tables like calibrate, named after the first record's profile (or
    --update-profile's). Rules: netcheck/engines/calibrate_pool.py, docs/capacity.md.
    """
    from rich.console import Console

    from netcheck.admin_client import invoked_as
    from netcheck.capacity import capacity_status
    from netcheck.config import Profile, load_profile
    from netcheck.engines.calibrate_pool import BATCH_FIELDS, pool_calibrations
    from netcheck.engines.calibrate_report import render_markdown, replace_tables, toml_tables

    console = Console(stderr=False)
    command = "netcheck engine pool " + " ".join(sys.argv[3:])
    try:
        loaded: list[dict[str, Any]] = []
        for path in records:
            try:
                with path.open("rb") as fh:
                    raw = fh.read(MAX_RECORD_BYTES + 1)
                if len(raw) > MAX_RECORD_BYTES:
                    raise ValueError(f"larger than {MAX_RECORD_BYTES} bytes")
                data = json.loads(raw.decode("utf-8"))
            except (OSError, ValueError, RecursionError) as exc:  # nested too deeply
                raise ValueError(f"{path}: not a readable JSON calibration record: {exc}") from exc
            if not isinstance(data, dict):
                raise ValueError(f"{path}: not a calibration record (a JSON object)")
            loaded.append(data)
        result = pool_calibrations(
            loaded,
            sources=[str(p) for p in records],
            coupling=coupling,
            rtt_jitter_s=rtt_jitter_s,
            max_rtt_s=max_rtt_s,
            max_card_gap=max_card_gap,
            allow_same_card=allow_same_card,
            slowness_floor=slowness_floor,
        )
        target = _profile_path(update_profile) if update_profile else None
        if target is not None:
            profile = load_profile(target)
            for field in BATCH_FIELDS:
                mine, theirs = getattr(profile, field), result["profile"].get(field)
                if mine != theirs:
                    raise ValueError(
                        f"--update-profile {target}: profile.{field} is {mine!r}, the records "
                        f"have {theirs!r}"
                    )
            result["profile"] = {**result["profile"], "name": profile.name}
        result["command"] = command
        markdown = render_markdown(result, command)
        tables = toml_tables(result)
        new_text = None
        if target is not None:
            new_text = replace_tables(target.read_text(encoding="utf-8"), tables)
            status = capacity_status(_checked_profile_text(target, new_text), invoked_as())
        else:
            status = capacity_status(Profile.model_validate(result["profile"]), invoked_as())
        out_dir.mkdir(parents=True, exist_ok=True)
        base = out_dir / result["profile"]["name"]
        Path(f"{base}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        Path(f"{base}.md").write_text(markdown, encoding="utf-8")
        Path(f"{base}.tables.toml").write_text(tables, encoding="utf-8")
        if target is not None and new_text is not None:  # last, atomically
            _replace_text(target, new_text)
    except (NetcheckError, ValueError, OSError) as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(2)
    console.print(markdown, markup=False, highlight=False, soft_wrap=True)
    if target is not None:
        console.print(f"updated {target}")
    console.print(status.message, markup=False)


def _checked_profile_text(target: Path, text: str) -> Any:
    """The profile that ``text`` would make of ``target`` (loaded from a copy next to it,
    so the name defaults as for ``target``).

    Raises:
        ConfigError: the text is not a valid profile (``target`` is untouched).
        OSError: the copy cannot be written.
    """
    import tempfile

    from netcheck.config import load_profile

    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".pool-") as tmp:
        copy = Path(tmp) / target.name
        copy.write_text(text, encoding="utf-8")
        return load_profile(copy)


def _replace_text(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` atomically (a synced file next to it, renamed over
    it): a failure leaves the old file whole. Raises OSError."""
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, target.stat().st_mode & 0o777)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _progress(bar: Any, task: Any, console: Any, text: str, frac: float) -> None:
    """Update the bar; without a terminal (logs, the device tool) print each step too."""
    bar.update(task, description=text, completed=frac)
    if not console.is_terminal:
        print(f"[calibrate {time.strftime('%H:%M:%S')}] {100 * frac:3.0f}% {text}", flush=True)
