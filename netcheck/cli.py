"""The ``netcheck`` command line (click).

Groups: ``keygen``, ``model synth``, ``reference build``, ``coordinator serve`` and
``check``, ``node run``, ``round run``, ``nodes``, ``demo``. Every command has ``--help``.
Errors netcheck raises on purpose (:class:`~netcheck.errors.NetcheckError`) are printed
as one line and exit with the status :func:`netcheck.exitcodes.exit_code_for` gives
(docs/admin-api.md, "Exit codes"; :mod:`netcheck.cli_errors`); anything else is a bug
and shows a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from netcheck import __version__
from netcheck.admin_client import admin_call, coordinator_config_option
from netcheck.cli_errors import NetcheckGroup, seconds_option
from netcheck.engines.presets import PRESETS

log = logging.getLogger("netcheck")


#: Set by the global ``--log-format`` / ``--log-timezone`` options (netcheck.logs).
LOG_STYLE = {"format": "text", "local_time": False}


def setup_logging(verbose: bool = False, label: str = "") -> None:
    """One log line per event: ISO-8601 time with zone, level, component, message
    (text, or one JSON object per line with ``--log-format json``; netcheck.logs)."""
    from netcheck.logs import formatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(str(LOG_STYLE["format"]), label, bool(LOG_STYLE["local_time"])))
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True
    )
    for noisy in ("aiohttp.access", "httpx", "filelock", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _config_file(default: str, what: str) -> Any:
    """The ``--config FILE`` option of a command that reads one config file (``what``
    names the file in the help text, e.g. "Node config")."""
    return click.option(
        "--config",
        "config_path",
        default=default,
        show_default=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help=f"{what} file (TOML); relative paths in it resolve against its folder.",
    )


_verbose_option = click.option("-v", "--verbose", is_flag=True, help="Log debug messages too.")


@click.group(cls=NetcheckGroup)
@click.version_option(__version__, prog_name="netcheck")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Log lines as text or as one JSON object per line (time, level, logger, label, message).",
)
@click.option(
    "--log-timezone",
    type=click.Choice(["utc", "local"]),
    default="utc",
    show_default=True,
    help="Zone of log times (ISO-8601, the offset always written).",
)
def main(log_format: str, log_timezone: str) -> None:
    """netcheck: validate untrusted GPU providers with hidden canaries in mixed batches."""
    LOG_STYLE["format"] = log_format
    LOG_STYLE["local_time"] = log_timezone == "local"


# -- keys -----------------------------------------------------------------------------


@main.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def keygen(path: Path) -> None:
    """Write a new Ed25519 identity key to PATH (PEM, mode 0600) and print its public key.

    Paste the printed public key into allowed_nodes in the coordinator config (for a
    node's key) or into coordinator_key in each node config (for the coordinator's key).
    """
    from netcheck.keys import generate_key, public_key_text

    key = generate_key(path)
    click.echo(public_key_text(key))


# -- models and references -------------------------------------------------------------


@main.group()
def model() -> None:
    """Synthetic models for profiles (generated locally, no download)."""


@model.command("synth")
@click.option(
    "--preset",
    default="tiny",
    show_default=True,
    type=click.Choice(list(PRESETS)),
    help="Preset name (the model's shape; the name also seeds the weights).",
)
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
def model_synth(preset: str, out_dir: Path) -> None:
    """Write a seeded synthetic Llama model + byte tokenizer (HF format) to OUT_DIR.

    The same preset gives byte-identical weights on any machine; the weight hash is
    printed and stored in OUT_DIR/netcheck-synth.json.
    """
    from netcheck.engines.synth import synth_model

    try:
        digest = synth_model(preset, out_dir)
    except OSError as exc:  # a folder that cannot be created or written, a full disk
        click.secho(f"error: {out_dir}: cannot write the model: {exc}", fg="red", err=True)
        sys.exit(2)
    click.echo(f"preset {preset}: weight hash {digest}")


@main.group()
def reference() -> None:
    """Reference sets: canary answers computed on trusted hardware."""


@reference.command("build")
@click.option("--profile", "profile_name", required=True, help="Profile name or TOML path.")
@click.option(
    "--count",
    default=64,
    show_default=True,
    type=click.IntRange(min=1),
    help="Prompts to answer (rounded up to B).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Coordinator config whose database receives the references.",
)
@click.option("--database", help="Database URL (overrides --config), e.g. sqlite:///netcheck.db.")
def reference_build(
    profile_name: str, count: int, config_path: Path | None, database: str | None
) -> None:
    """Run the profile's engine on this (trusted) machine and store prompts + answers."""
    from netcheck.config import load_coordinator_config, load_profile
    from netcheck.engines import load_engine
    from netcheck.progress import progress_bar
    from netcheck.references.build import build_references
    from netcheck.storage import Store

    setup_logging()
    if database is None and config_path is None:
        raise click.UsageError(
            "give --config FILE, the coordinator config whose database receives the "
            "references (e.g. --config configs/coordinator.toml), or --database URL"
        )
    if config_path is not None:  # profiles resolve as the coordinator resolves them
        cfg = load_coordinator_config(config_path)
        database = database or cfg.database
        profile = cfg.load_profile(profile_name)
    else:
        profile = load_profile(profile_name)
    assert database is not None
    click.echo(
        f"loading engine {profile.engine} {profile.model} ({profile.dtype} on "
        f"{profile.device}); this can take a while (a model's first use writes it into "
        "the model cache)",
        err=True,
    )
    engine = load_engine(profile)
    store = Store(database)
    stored = 0

    def on_batch(done: int, total: int) -> None:
        nonlocal stored
        stored = done
        advance(done, total)

    try:
        with progress_bar("reference answers", total=count) as advance:
            n = build_references(profile, engine, store, count, progress=on_batch)
    except KeyboardInterrupt:
        click.echo(
            f"interrupted: {stored} of {count} references stored (whole batches only); "
            "run the command again to add more",
            err=True,
        )
        sys.exit(130)
    click.echo(
        f"stored {n} references for {profile.name} (fingerprint {engine.fingerprint_id[:12]})"
    )


# -- coordinator -----------------------------------------------------------------------


@main.group()
def coordinator() -> None:
    """Run the coordinator service."""


@coordinator.command("serve")
@_config_file("configs/coordinator.toml", "Coordinator config")
@_verbose_option
def coordinator_serve(config_path: Path, verbose: bool) -> None:
    """Serve the node websocket endpoint and the admin API until interrupted.

    Every field of the config is commented in configs/coordinator.toml (the detection
    settings, confirm_max_cycles among them, also in docs/detection.md, 'Operator
    interface'). A bad value or an unknown key stops it at start with a message naming
    the file and the field (exit 3).
    """
    from netcheck.coordinator.app import serve

    setup_logging(verbose, "coordinator")
    asyncio.run(serve(config_path))


@main.group()
def gateway() -> None:
    """Run a gateway: one of several coordinator processes sharing PostgreSQL."""


@gateway.command("serve")
@_config_file("configs/gateway.toml", "Gateway config (a coordinator config plus gateway_id)")
@_verbose_option
def gateway_serve(config_path: Path, verbose: bool) -> None:
    """Serve nodes and take part in (or lead) rounds until interrupted (docs/gateways.md).

    No gateway config is shipped: copy configs/coordinator.toml, add a unique gateway_id
    and a PostgreSQL `database` shared by every gateway (README, 'Running several
    gateways').
    """
    from netcheck.gateway.app import serve

    setup_logging(verbose, "gateway")
    asyncio.run(serve(config_path))


# -- node ------------------------------------------------------------------------------


@main.group()
def node() -> None:
    """Run a node (a GPU provider) that joins a coordinator."""


@node.command("run")
@_config_file("configs/node.toml", "Node config")
@click.option(
    "--emulate-batch-time",
    type=float,
    default=None,
    callback=seconds_option,
    help="EMULATION for one-machine demos: hold each result until an emulated GPU "
    "service time of this many seconds has passed. Never use on a real node.",
)
@click.option("--adversary", type=click.Choice(["wrong-dtype", "made-up", "proxy"]), hidden=True)
@click.option(
    "--backend",
    hidden=True,
    help="Shared backend URL for --adversary proxy (made-up copies its fingerprint).",
)
@_verbose_option
def node_run(
    config_path: Path,
    emulate_batch_time: float | None,
    adversary: str | None,
    backend: str | None,
    verbose: bool,
) -> None:
    """Join the coordinator named in the config and answer validation rounds."""
    from netcheck.node.app import WorkerFactory, engine_worker, run_node

    cfg_label = config_path.stem
    setup_logging(verbose, cfg_label)
    make_worker: WorkerFactory = engine_worker
    if emulate_batch_time is not None or adversary is not None:
        # Lab code (labelled emulation, demo adversaries) is wired in here, at the top
        # layer, and only when asked for: the node itself never imports netcheck.lab.
        from netcheck.lab.nodes import worker_factory

        make_worker = worker_factory(emulate_batch_time, adversary, backend)
    asyncio.run(run_node(config_path, make_worker))


@main.command()
@_config_file("configs/node.toml", "Node config")
@click.option("--no-selftest", is_flag=True, help="Skip the quick determinism selftest.")
def doctor(config_path: Path, no_selftest: bool) -> None:
    """Check a node's setup: config, key, profile, coordinator reachable and pinned key
    right (without joining), engine loads, the coordinator accepts the profile and has
    references for this fingerprint (a signed query, no session), quick selftest. Exits
    1 if a check fails."""
    from rich.table import Table

    from netcheck.node.doctor import run_checks
    from netcheck.report import console

    out = console()
    with out.status("checking") as status:
        checks = run_checks(
            config_path, selftest=not no_selftest, progress=lambda n: status.update(f"{n}...")
        )
    table = Table(title=f"netcheck doctor: {config_path}")
    for col in ("check", "result", "detail"):
        table.add_column(col)
    for c in checks:
        result = (
            "[red]FAIL[/red]"
            if not c.ok
            else "[yellow]warn[/yellow]"
            if c.warning
            else "[green]ok[/green]"
        )
        table.add_row(c.name, result, c.detail)
    out.print(table)
    sys.exit(0 if all(c.ok for c in checks) else 1)


@node.command("backend", hidden=True)
@click.option("--profile", "profile_name", required=True, help="Profile name or TOML path.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    required=True,
    help="Loopback port the proxies connect to.",
)
@click.option(
    "--emulate-batch-time",
    type=float,
    required=True,
    callback=seconds_option,
    help="EMULATION: seconds one batch takes on the one shared emulated GPU.",
)
@click.option(
    "--beta",
    type=float,
    default=1.0,
    show_default=True,
    help="Batching efficiency of the emulated GPU, 0..1 (1 = batches run one after another).",
)
def node_backend(profile_name: str, port: int, emulate_batch_time: float, beta: float) -> None:
    """DEMO ADVERSARY: shared inference backend behind several proxy identities."""
    from netcheck.lab.nodes import run_backend

    setup_logging(False, "backend")
    asyncio.run(run_backend(profile_name, port, emulate_batch_time, beta))


# -- operator commands against a running coordinator ------------------------------------


@main.group("round")
def round_group() -> None:
    """Validation rounds."""


@round_group.command("run")
@coordinator_config_option
@click.option(
    "--profile", "profile_name", default=None, help="Profile to validate (default: first)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON report.")
@click.option(
    "--fail-on-failing",
    is_flag=True,
    help="Exit with status 9 when a node gets a failing verdict (for scripts and CI).",
)
def round_run(
    config_path: Path, profile_name: str | None, as_json: bool, fail_on_failing: bool
) -> None:
    """Ask the running coordinator to run a round now and print the verdict table.

    Exits 8 when no node was checked (the canary pool is empty for every fingerprint).
    """
    from netcheck.report import check_round_outcome, console, print_round

    with console().status("round running: dispatch, release, compute, verify"):
        report = admin_call(config_path, "POST", "/admin/rounds", {"profile": profile_name})
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        print_round(report)
    check_round_outcome([report], fail_on_failing=fail_on_failing, config_path=config_path)


@main.command()
@coordinator_config_option
@click.option("--json", "as_json", is_flag=True, help="Print raw JSON.")
def nodes(config_path: Path, as_json: bool) -> None:
    """List nodes connected to the running coordinator (and those seen before).

    With no node connected it says so in one line, naming the coordinator asked and
    the command a node operator runs to join.
    """
    from netcheck.admin_client import coordinator_label, load_admin_config, node_endpoint
    from netcheck.report import print_nodes

    data = admin_call(config_path, "GET", "/admin/nodes")
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    if data["known"] or data["connected"]:
        print_nodes(data)
    if not data["connected"]:
        click.echo(
            f"no node connected to {coordinator_label(config_path)}; a node operator joins "
            "with `netcheck node run --config node.toml` (coordinator_url = "
            f"{node_endpoint(load_admin_config(config_path))} in that file)"
        )


# -- demo ------------------------------------------------------------------------------


@main.command()
@click.option(
    "--rounds",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Validation rounds to run.",
)
@click.option(
    "--workdir",
    default="demo-run",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Scratch folder for keys, configs, database and logs (recreated).",
)
@click.option(
    "--profile",
    "profile_name",
    default="cpu-tiny",
    show_default=True,
    help="Profile the demo's nodes claim and run (a name in configs/profiles).",
)
@click.option(
    "--serve",
    is_flag=True,
    help="Keep the coordinator and nodes running after the rounds and print the "
    "dashboard URL (Ctrl-C stops).",
)
def demo(rounds: int, workdir: Path, profile_name: str, serve: bool) -> None:
    """Run a coordinator and 7 node processes on loopback and show cheaters caught.

    Three honest nodes; one that claims the profile's float32 but computes in bfloat16
    (LLM profiles only); one that returns made-up tokens; and two identities that proxy
    to one shared backend.
    GPU service time is EMULATED (all nodes share this machine's CPU), sized to this
    host's load at the start. Exits 0 when every honest node passes every round and every
    cheater fails every round; 1 otherwise, reported as INCONCLUSIVE (HOST TOO BUSY) when
    honest nodes failed only because the host's load rose after the sizing.
    """
    from netcheck.lab.demo import run_demo

    setup_logging(False, "demo")
    sys.exit(run_demo(workdir, rounds, profile_name, serve))


# -- commands defined next to the code they drive ---------------------------------------


def _register_subcommands() -> None:
    from netcheck.coordinator.commands import flags, screen
    from netcheck.coordinator.preflight import coordinator_check
    from netcheck.coordinator.round_commands import round_list, round_show
    from netcheck.engines.commands import engine
    from netcheck.node.commands import node_setup, node_status
    from netcheck.receipts import receipt
    from netcheck.references.commands import references_status

    coordinator.add_command(coordinator_check)
    node.add_command(node_status)
    node.add_command(node_setup)
    reference.add_command(references_status)
    round_group.add_command(round_list)
    round_group.add_command(round_show)
    main.add_command(engine)
    main.add_command(receipt)
    main.add_command(screen)
    main.add_command(flags)


_register_subcommands()
