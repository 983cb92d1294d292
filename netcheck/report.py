"""Terminal tables for operators (rich): round verdicts and node lists."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

#: Characters of a node key in text form (``ed25519:`` + 43 base64url characters).
KEY_WIDTH = 51


def console() -> Console:
    """A console for tables: the terminal's width, or 200 columns when piped to a file
    (wide enough for a whole node key next to the other columns)."""
    probe = Console()
    return probe if probe.is_terminal else Console(width=200)


def key_column(table: Table, header: str = "node key") -> None:
    """Add a column that shows node keys whole: never wrapped, cut or folded."""
    table.add_column(header, no_wrap=True, min_width=KEY_WIDTH, overflow="ignore")


#: Characters a table shows of a node key at least when it cuts keys (``ed25519:`` and
#: 12 of the 43 key characters: 72 bits).
KEY_PREFIX_CHARS = 20


def key_prefixes(keys: Iterable[str], min_chars: int = KEY_PREFIX_CHARS) -> dict[str, str]:
    """Each key's shortest prefix of at least ``min_chars`` characters that no other key
    in ``keys`` starts with, ``…`` appended when cut (a key no longer than that is shown
    whole), so a table's rows stay apart however alike their keys are (a node can choose
    a key sharing a long prefix with another's).

    Neighbours in sorted order share the longest prefixes, so this is O(n log n).
    """
    ordered = sorted(set(keys))

    def common(a: str, b: str) -> int:
        n = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            n += 1
        return n

    shown: dict[str, str] = {}
    for i, key in enumerate(ordered):
        near = [ordered[j] for j in (i - 1, i + 1) if 0 <= j < len(ordered)]
        need = max([min_chars, *(common(key, other) + 1 for other in near)])
        shown[key] = key if need >= len(key) else key[:need] + "…"
    return shown


VERDICT_STYLE = {
    "pass": "green", "late": "yellow", "profile-mismatch": "magenta",
    "unchecked": "black on bright_yellow",  # not a failure, not a pass: stands out
}  # fmt: skip
#: Verdicts that are neither a failure nor a pass: the coordinator could not check.
NOT_CHECKED = frozenset({"unchecked"})


def _prog() -> str:
    """How to call netcheck in a printed command (:func:`netcheck.admin_client.invoked_as`)."""
    from netcheck.admin_client import invoked_as

    return invoked_as()


def verdict_text(verdict: str) -> str:
    """A verdict coloured for the terminal (green pass, red failures)."""
    style = VERDICT_STYLE.get(verdict, "red")
    return f"[{style}]{verdict}[/{style}]"


def print_round(report: Mapping[str, Any], names: Mapping[str, str] | None = None) -> None:
    """Print one round's verdict table and phase timings.

    Args:
        report: the admin API's round report (``RoundReport.as_dict()``).
        names: optional node key → display name. A node without one is shown by its
            key cut to the shortest prefix that tells the table's keys apart
            (:func:`key_prefixes`).
    """
    names = dict(names or {})
    for v in report["verdicts"]:
        if v.get("name"):
            names.setdefault(v["node_key"], v["name"])
    short = key_prefixes(v["node_key"] for v in report["verdicts"])
    table = Table(title=f"round {report['round_id']} ({report['profile']})")
    for col in ("node", "verdict", "elapsed s", "canaries", "reason"):
        table.add_column(col)
    for v in sorted(report["verdicts"], key=lambda v: names.get(v["node_key"], v["node_key"])):
        elapsed = v.get("elapsed_s")
        table.add_row(
            Text(names.get(v["node_key"], short[v["node_key"]])),  # node text: no markup
            verdict_text(v["verdict"]),
            "-" if elapsed is None else f"{elapsed:.3f}",
            f"{v['canaries_matched']}/{v['canaries_checked']}",
            Text(v["reason"]),  # may hold node text: never parsed as rich markup
        )
    out = console()
    out.print(table)
    checked = [v for v in report["verdicts"] if v["verdict"] not in NOT_CHECKED]
    passed = sum(1 for v in checked if v["verdict"] == "pass")
    out.print(
        f"  checked {len(checked)} of {len(report['verdicts'])} node(s), {passed} passed"
        + ("" if len(checked) == len(report["verdicts"]) else f"; see `{_prog()} reference status`")
    )
    phases = {k: v for k, v in (report.get("phases") or {}).items() if isinstance(v, int | float)}
    if phases:
        out.print(
            "  phases: "
            + ", ".join(f"{k.removesuffix('_s')} {val * 1000:.1f} ms" for k, val in phases.items())
        )


def check_round_outcome(
    reports: Sequence[Mapping[str, Any]],
    *,
    fail_on_failing: bool = False,
    config_path: Path | None = None,
) -> None:
    """Raise when round reports checked nobody, or (if asked) when a node failed.

    Args:
        reports: admin API round reports (``RoundReport.as_dict()``), each with
            ``verdicts`` (``verdict``, ...) or ``counts`` (verdict -> number, as the
            screening report's rounds carry them) and ``profile``.
        fail_on_failing: also raise :class:`NodesFailed` for a failing verdict.
        config_path: the command's coordinator config, named in the build command.

    Raises:
        NothingChecked: at least one verdict and none checked (every node
            ``unchecked``); the message names the command that builds references.
        NodesFailed: ``fail_on_failing`` and some verdict other than pass/unchecked.
    """
    from netcheck.admin_client import NodesFailed, NothingChecked
    from netcheck.references.pool import build_command, with_config

    verdicts = [v for r in reports for v in r.get("verdicts", ())]
    for r in reports:  # screening reports carry verdict counts per round instead
        verdicts += [{"verdict": k} for k, n in r.get("counts", {}).items() for _ in range(n)]
    if verdicts and all(v["verdict"] in NOT_CHECKED for v in verdicts):
        profiles = sorted({str(r.get("profile", "")) for r in reports})
        raise NothingChecked(
            f"nothing was checked: all {len(verdicts)} verdicts in {len(reports)} round(s) "
            "are 'unchecked' (no unspent canary for the nodes' fingerprints). "
            "Build references with: "
            + "; ".join(with_config(build_command(p), config_path, _prog()) for p in profiles)
            + f" (see `{_prog()} reference status`)"
        )
    failing = [v for v in verdicts if v["verdict"] != "pass" and v["verdict"] not in NOT_CHECKED]
    if fail_on_failing and failing:
        raise NodesFailed(f"{len(failing)} failing verdict(s)")


def check_confirmations(report: Mapping[str, Any], *, config_path: Path | None = None) -> None:
    """Raise when a confirmation of a screening report (``report["confirmations"]``,
    admin ``POST /admin/screening``) was not started or stopped because the canary
    pool could not cover it (entries with ``pool_short``; and the slowness nominees of
    ``report["alone_pool_short"]``, the alone stage's): such a suspect group or node
    was not judged (no ``cleared`` record), so the run did not do what it was asked.

    Raises:
        NothingChecked: some entry has ``pool_short``; the message counts them and
            their unchecked rounds and names the command that builds references.
    """
    from netcheck.admin_client import NothingChecked
    from netcheck.references.pool import build_command, with_config

    short = [c for c in report.get("confirmations", ()) if c.get("pool_short")]
    alone = list(report.get("alone_pool_short", ()))
    if not short and not alone:
        return
    profile = str(report.get("profile", ""))
    unchecked = sum(int(c.get("unchecked_rounds", 0)) for c in (*short, *alone))
    what = [f"{len(short)} suspect group(s)"] if short else []
    what += [f"{len(alone)} slowness nominee(s) confirmed alone"] if alone else []
    raise NothingChecked(
        f"{' and '.join(what)} not judged: the canary pool of profile {profile} "
        "could not cover their confirmation rounds"
        + (f" ({unchecked} confirmation round(s) ran with a member unchecked)" if unchecked else "")
        + ", so each was not started or was stopped, with no cleared record. Build references "
        f"with: {with_config(build_command(profile), config_path, _prog())}, then run "
        "screening again"
    )


def print_nodes(data: Mapping[str, Any]) -> None:
    """Print every known node from ``GET /admin/nodes``: connected ones with their
    round-trip time and peer, disconnected ones with when they were last seen."""
    from datetime import UTC, datetime

    live = {n["node_key"]: n for n in data["connected"]}
    known = list(data.get("known", []))
    for key, n in live.items():  # a session whose node row is not stored yet
        if not any(k["node_key"] == key for k in known):
            known.append({**n, "connected": True, "last_seen_at": None})
    table = Table(title=f"{len(known)} known node(s), {len(live)} connected")
    table.add_column("name")
    key_column(table)
    for col in ("profile", "fingerprint", "connected", "last seen (UTC)", "rtt ms", "peer"):
        table.add_column(col)
    for n in known:
        s = live.get(n["node_key"], {})
        rtt = s.get("rtt_s")
        seen = n.get("last_seen_at")
        table.add_row(
            Text(n.get("display_name") or s.get("name") or n.get("name") or "-"),
            Text(n["node_key"]),
            Text(n["profile"]),
            n["fingerprint_id"][:12],
            "[green]yes[/green]" if s else "no",
            "now" if s else
            ("-" if seen is None else datetime.fromtimestamp(seen, UTC).isoformat(timespec="seconds")),
            "-" if rtt is None else f"{rtt * 1000:.2f}",
            Text(s.get("peer", "-")),
        )  # fmt: skip
    console().print(table)
