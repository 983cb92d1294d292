"""Operator commands for detection: ``netcheck screen run`` and ``netcheck flags ...``.

Two click groups, registered on the main command by ``netcheck/cli.py``
(``main.add_command(screen)``, ``main.add_command(flags)``). They talk to a running
coordinator through its admin API (:func:`netcheck.admin_client.admin_request`):

- ``netcheck screen run [--rounds N] [--profile P] [--json]`` -> ``POST /admin/screening``
- ``netcheck flags list [--kind K] [--status S] [--review R] [--node KEY] [--json]`` -> ``GET /admin/flags``
- ``netcheck flags show ID [--json]`` -> ``GET /admin/flags/ID``

``screen run`` follows its job with :mod:`netcheck.coordinator.screen_follow`.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from netcheck.admin_client import (
    AdminConflict,
    AdminError,
    AdminStorageError,
    RunStopped,
    admin_call,
    coordinator_config_option,
    coordinator_label,
    invoked_as,
)
from netcheck.coordinator.screen_follow import (
    analysis_line,
    cancel_job,
    ended_unjudged,
    run_job,
    still_cancelling,
    stop_signals_interrupt,
)
from netcheck.exitcodes import Exit
from netcheck.report import check_confirmations, check_round_outcome
from netcheck.report import console as report_console

STATUS_STYLE = {"confirmed": "red", "pending": "yellow", "cleared": "green"}

_json_option = click.option("--json", "as_json", is_flag=True, help="Print raw JSON.")


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def _review(review: Mapping[str, Any] | None) -> str:
    """``state (by, when)`` of a flag's review, or ``open``."""
    if not review or review.get("state", "open") == "open" and not review.get("by"):
        return "open"
    return f"{review['state']} ({review.get('by', '?')}, {_when(review.get('at'))})"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _status(status: str) -> str:
    style = STATUS_STYLE.get(status, "white")
    return f"[{style}]{status}[/{style}]"


def flags_table(
    rows: list[Mapping[str, Any]], title: str = "flags", names: Mapping[str, str] | None = None
) -> Table:
    """A rich table of flag rows (as ``GET /admin/flags`` returns them); nodes are shown
    whole (``name (key)`` when ``names`` has a display name), never as rich markup."""
    names = dict(names or {})
    for f in rows:  # the API's node_names (operator's names, same order as node_keys)
        for k, n in zip(f.get("node_keys", []), f.get("node_names") or [], strict=False):
            if n:
                names.setdefault(k, n)
    table = Table(title=title)
    for col in ("id", "kind", "status", "review", "nodes", "statistic", "threshold", "created"):
        table.add_column(col)
    for f in rows:
        table.add_row(
            str(f["flag_id"]),
            f["kind"],
            _status(f["status"]),
            Text(_review(f.get("review"))),
            Text("\n".join(_who(k, names) for k in f["node_keys"])),
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
    default=32,
    show_default=True,
    help="Rounds to run in total; every n-th is a full-load round (n = screening_full_every "
    "in the coordinator config, default 4), the others are screening rounds. At the "
    "default load probability 2/3, 16 rounds (12 screening) let 99.8% of node pairs be "
    "compared at all, 32 rounds all but 1 in 500,000 (docs/detection.md, 'Rounds needed').",
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
    --override-capacity gives a reason.

    Shows rounds done and an ETA while it runs, then the confirmation: rounds run so
    far, suspect groups under test and settled, and the time taken (it has no ETA). Ctrl-C cancels the run on the
    coordinator (the round in flight finishes; no analysis; it waits at most 600 s for
    that, then names the job still cancelling; a second Ctrl-C stops the wait) and exits
    130; so do SIGTERM and SIGHUP (a closed terminal or SSH session). Exits 8 when
    no node was checked in any round (empty canary pool), or when a suspect group's
    confirmation (or a slowness nominee's alone rounds) was not started or was stopped
    because the canary pool could not cover its rounds (not judged: no cleared record). Exits 11 when the run ended
    without its judgement: cancelled by another client (a second terminal, the admin
    API) or stopped by the coordinator's shutdown (what ran is printed first).
    """
    body: dict[str, Any] = {"rounds": rounds, "profile": profile_name, "check_capacity": True}
    if override is not None:
        body["capacity_override"] = override
    held: dict[str, Any] = {}
    try:
        with stop_signals_interrupt():  # SIGTERM, SIGHUP: as Ctrl-C, the job is cancelled
            job = run_job(config_path, body, held)
    except KeyboardInterrupt:
        try:
            job = cancel_job(config_path, held) if "job_id" in held else None
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, say what is not known
            where = f"/admin/screening/jobs/{held['job_id']}"
            click.echo(f"interrupted again: screening job {held['job_id']} may still be "
                       f"running or cancelling on the coordinator; GET {where} shows its "
                       f"state, DELETE {where} cancels it", err=True)  # fmt: skip
            sys.exit(int(Exit.INTERRUPTED))
        done = "" if job is None else f" after {job['rounds_done']} of {job['rounds_total']} rounds"
        late = "" if job is None else still_cancelling(job)
        if late:
            click.echo(f"interrupted: cancel requested{done}; {late}", err=True)
        else:
            click.echo(f"interrupted: screening run cancelled on the coordinator{done}", err=True)
        sys.exit(int(Exit.INTERRUPTED))
    if job["state"] == "failed":
        if job.get("error_kind") == "storage":  # the database, not a refusal: exit 10
            raise AdminStorageError(f"screening run failed: {job['error']}")
        raise AdminConflict(f"screening run failed: {job['error']}")
    stopped = ended_unjudged(job)
    report = job.get("report")
    if report is None:  # cancelled at shutdown before the runner returned: nothing to print
        raise RunStopped(stopped or f"screening job {job.get('job_id', '?')}: no report")
    rounds_run = [{**r, "profile": report["profile"]} for r in report.get("rounds", [])]
    if as_json:
        click.echo(json.dumps(report, indent=2))
        if stopped:
            raise RunStopped(stopped)
        check_round_outcome(rounds_run, config_path=config_path)
        check_confirmations(report, config_path=config_path)
        return
    names = held.get("names", {})
    console = report_console()
    kinds = [r["kind"] for r in report.get("rounds", [])]
    console.print(
        f"profile {report['profile']}: {kinds.count('screening')} screening and "
        f"{kinds.count('full')} full-load rounds run"
    )
    analysis = report.get("analysis")
    if analysis:
        console.print(analysis_line(analysis))
    for c in report.get("confirmations", []):
        members = ", ".join(_who(m, names) for m in c["group"])
        console.print(Text(f"  suspect group [{members}]: {c['verdict']}"))
        if c.get("pool_short"):
            n = int(c.get("unchecked_rounds", 0))
            dry = f" ({n} confirmation round(s) with a member unchecked)" if n else ""
            console.print(Text(f"    cut short by the canary pool, no cleared record{dry}: "
                               f"{c.get('reason') or c.get('stopped', '')}"))  # fmt: skip
        elif c.get("reason"):
            console.print(Text(f"    {c['reason']}"))
    for a in report.get("alone_pool_short", []):
        console.print(Text(f"  slowness nominee {_who(a['node'], names)}: alone rounds cut "
                           f"short by the canary pool, no record: {a['reason']}"))  # fmt: skip
    if report.get("flags"):
        console.print(flags_table(report["flags"], "flags raised", names))
        if any(f.get("status") == "cleared" for f in report["flags"]):
            console.print(
                Text(
                    "status cleared: the confirmation rounds did not confirm the suspicion "
                    "(too small a slowdown, or too few timed rounds: the per-member table of "
                    "`flags show ID`); the record is kept for audit (docs/detection.md, "
                    "'Confirmation')"
                )
            )
    else:
        console.print(
            Text(
                f"no flags raised by this run (`{invoked_as()} flags list --config "
                f"{shlex.quote(str(config_path))}` "
                "lists earlier ones)"
            )
        )
    if stopped:  # before the checks below: the run itself did not finish
        raise RunStopped(stopped)
    check_round_outcome(rounds_run, config_path=config_path)
    check_confirmations(report, config_path=config_path)


def _who(key: str, names: Mapping[str, str]) -> str:
    """A node as ``name (key)`` when it has a display name, else its whole key."""
    name = names.get(key)
    return f"{name} ({key})" if name else key


@click.group("flags")
def flags() -> None:
    """Flags raised against nodes, with the evidence to re-check them."""


@flags.command("list")
@coordinator_config_option
@click.option(
    "--kind",
    default=None,
    help="shared-backend, declared-host, capacity, result-sharing, relay, answer-failure or "
    "slow (another name is an error, exit 2).",
)
@click.option(
    "--status",
    default=None,
    help="The detector's state: confirmed, pending or cleared (not the analyst's review: "
    "for the flags nobody has looked at yet, --review open).",
)
@click.option(
    "--review",
    default=None,
    help="The analyst's review state: open, acknowledged, resolved or false-positive "
    "(e.g. --review open: the flags nobody has looked at yet).",
)
@click.option("--node", "node_key", default=None, help="Only flags naming this node key.")
@_json_option
def flags_list(
    config_path: Path,
    kind: str | None,
    status: str | None,
    review: str | None,
    node_key: str | None,
    as_json: bool,
) -> None:
    """List flags, newest first."""
    from urllib.parse import urlencode

    filters = (("kind", kind), ("status", status), ("review", review), ("node", node_key))
    params = {k: v for k, v in filters if v}
    path = "/admin/flags" + (f"?{urlencode(params)}" if params else "")
    data = admin_call(config_path, "GET", path)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    elif data["flags"]:
        report_console().print(flags_table(data["flags"]))
    else:
        matching = " matching " + ", ".join(f"{k}={v}" for k, v in params.items()) if params else ""
        click.echo(
            f"no flags{matching} on {coordinator_label(config_path)}; every round's checks and "
            f"`{invoked_as()} screen run --config {shlex.quote(str(config_path))}` raise them"
        )


@flags.command("show")
@coordinator_config_option
@click.argument("flag_id", type=int)
@_json_option
def flags_show(config_path: Path, flag_id: int, as_json: bool) -> None:
    """Show one flag with its evidence (rounds, schedule bits, latencies, receipts).

    What decides comes first (the flag, its reviews and rule, the per-member
    confirmation table), then at most 10 evidence rounds (--json and the dashboard page
    have all)."""
    flag = admin_call(config_path, "GET", f"/admin/flags/{flag_id}")
    if as_json:
        click.echo(json.dumps(flag, indent=2))
        return
    console = report_console()
    console.print(flags_table([flag], f"flag {flag_id}"))
    config = f"--config {shlex.quote(str(config_path))}"  # the commands below run as shown
    prog = invoked_as()
    pairs = zip(flag.get("node_keys", []), flag.get("node_names") or [], strict=False)
    names = {k: n for k, n in pairs if n}  # the operator's display names, as in the table
    for r in flag.get("reviews", []):
        note = f": {r['note']}" if r.get("note") else ""
        console.print(Text(f"review: {r['state']} by {r['by']} at {_when(r['at'])}{note}"))
    ev = flag.get("evidence", {})
    rule = flag.get("rule") or ev.get("rule")
    if rule:
        console.print(Text(f"rule: {rule}"))
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
                Text(_who(m["node_key"], names)), str(m["n_coloaded"]), str(m["n_alone"]),
                _num(m.get("slowdown")), _num(m.get("t")), _num(m.get("p")),
                "yes" if m["confirmed"] else "no",
            )  # fmt: skip
        console.print(table)
    if occurrences := ev.get("occurrences"):
        console.print(f"seen {len(occurrences)} times (one open flag collects repeats):")
        for o in occurrences:
            console.print(Text(f"  {_when(o.get('at'))}: statistic {_num(o.get('statistic'))}"
                               f", {len(o.get('rounds') or [])} rounds"))  # fmt: skip
    url = _url_maker(config_path)
    page = url(links["dashboard"]) if (links := flag.get("links")) else None
    rounds = flag.get("evidence_rounds", [])
    console.print(
        Text(f"evidence rounds: {len(rounds)} (see each with: {prog} round show {config} ID)")
    )
    for r in rounds[:SHOWN_ROUNDS]:
        console.print(Text(f"  {r['round_id']}  {url(r['dashboard'])}"))
    if len(rounds) > SHOWN_ROUNDS:
        where = f"--json, or the dashboard page {page}" if page else "--json"
        console.print(Text(f"  ... {len(rounds) - SHOWN_ROUNDS} more ({where})"))
    if page:
        console.print(Text(f"dashboard: {page}"))
    console.print(Text(_receipts_line(ev.get("receipts") or [], links, url, prog, config)))
    console.print(Text(f"full evidence: {prog} flags show {config} --json {flag_id}"))


def _receipts_line(
    receipts: list[dict[str, Any]],
    links: dict[str, str] | None,
    url: Callable[[str], str],
    prog: str,
    config: str,
) -> str:
    """The ``flags show`` line on a flag's signed result receipts: how many, where to
    download them (``receipts.json``, with the admin token as a header) and the command
    that checks one offline (filled in with the first receipt's node and round)."""
    line = f"receipts: {len(receipts)} (session id, commitment, signature)"
    if not receipts:
        return line
    if links and links.get("receipts"):
        line += (
            f"; download them: curl -H 'Authorization: Bearer <admin_token>' "
            f"{url(links['receipts'])}"
        )
    first = receipts[0]
    node_key, round_id = first.get("node_key"), first.get("round_id")
    if node_key and round_id:
        line += (
            f"; check one offline: {prog} receipt verify {config} "
            f"--node-key {shlex.quote(str(node_key))} --round-id {shlex.quote(str(round_id))}"
        )
    return line


#: Evidence rounds ``flags show`` lists; the rest are in --json and on the dashboard.
SHOWN_ROUNDS = 10


def _url_maker(config_path: Path) -> Callable[[str], str]:
    """A function giving an admin-server path (``/dashboard/...``) as a full URL at the
    coordinator that ``config_path`` names; the path itself when that config does not
    load."""
    from netcheck.admin_client import admin_url, load_admin_config
    from netcheck.errors import NetcheckError

    try:
        cfg = load_admin_config(config_path)
    except NetcheckError:
        return lambda path: path
    return lambda path: admin_url(cfg, path)


#: review state -> the ``netcheck flags`` command that moves a flag to it.
REVIEW_COMMANDS: dict[str, str] = {}


def _review_command(name: str, state: str, summary: str) -> None:
    REVIEW_COMMANDS[state] = name

    @flags.command(
        name, help=f"{summary} Exits 6, naming what to run, if the flag's state does not allow it."
    )
    @coordinator_config_option
    @click.argument("flag_id", type=int)
    @click.option("--by", default=None, help="Who reviews (default: $USER).")
    @click.option("--note", default="", help="Why (kept with the review, shown on the flag).")
    def command(config_path: Path, flag_id: int, by: str | None, note: str) -> None:
        who = by or os.environ.get("USER") or os.environ.get("USERNAME") or ""
        if not who:
            raise click.UsageError("give --by NAME (no $USER to default to)")
        try:
            row = admin_call(
                config_path, "POST", f"/admin/flags/{flag_id}/review",
                {"state": state, "by": who, "note": note}, timeout_s=30,
            )  # fmt: skip
        except AdminConflict as exc:
            hint = _review_hint(config_path, flag_id, state)
            raise AdminConflict(f"{exc}{hint}") from exc
        click.echo(f"flag {flag_id}: {row['state']} by {row['by']} at {_when(row['at'])}")


def _review_hint(config_path: Path, flag_id: int, wanted: str) -> str:
    """What to run instead, for a review refused because of the flag's current state
    (``""`` when the state allows ``wanted``: another 409, or the flag unreadable):
    ``; run `netcheck flags reopen ...` first, then `netcheck flags ack ...```."""
    from netcheck.storage.reviews import TRANSITIONS

    try:
        flag = admin_call(config_path, "GET", f"/admin/flags/{flag_id}", timeout_s=30)
    except AdminError:
        return ""
    current = str((flag.get("review") or {}).get("state", "open"))
    allowed = [s for s in TRANSITIONS.get(current, ()) if s in REVIEW_COMMANDS]
    if current == wanted:
        return f" (it is {current} already)"
    if wanted in allowed or not allowed:
        return ""
    config = f"--config {shlex.quote(str(config_path))}"

    def line(state: str) -> str:
        return f"`{invoked_as()} flags {REVIEW_COMMANDS[state]} {config} {flag_id}`"

    then = [s for s in allowed if wanted in TRANSITIONS.get(s, ())]
    if then:  # e.g. false-positive -> open -> acknowledged
        return f"; run {line(then[0])} first, then {line(wanted)}"
    return "; run " + " or ".join(line(s) for s in allowed)


_review_command("ack", "acknowledged", "Acknowledge a flag: someone is looking into it.")
_review_command("resolve", "resolved", "Mark a flag resolved (the node was dealt with).")
_review_command("false-positive", "false-positive", "Mark a flag a false positive.")
_review_command(
    "reopen", "open", "Reopen a flag (acknowledged, resolved or false-positive): back to open."
)
