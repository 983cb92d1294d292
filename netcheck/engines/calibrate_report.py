"""Render a calibration result (:func:`netcheck.engines.calibrate.run_calibration`):
markdown, the ``[deadline]`` and ``[capacity]`` TOML tables, and a profile file with
those tables updated in place (tomlkit: the file's comments and layout are kept)."""

from __future__ import annotations

import json
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Comment, Item, Table, Whitespace

from netcheck.capacity import MIN_MARGIN, TARGET_MARGIN, UNSAFE_TEXT

#: How the comment :func:`toml_tables` writes under a table header starts: the line
#: that says where and when the figures were measured, replaced on each update.
PROVENANCE_PREFIXES = ("# measured", "# CPU figures")


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _table(name: str, values: dict[str, Any], comment: str) -> str:
    lines = [f"[{name}]", f"# {comment}"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None]
    return "\n".join(lines) + "\n"


def toml_tables(result: dict[str, Any]) -> str:
    """The ``[deadline]`` (and, when t(2) was measured, ``[capacity]``) tables."""
    label = "CPU figures" if result.get("cpu") else "measured"
    where = f"by `netcheck engine calibrate` on {result['card']}"
    if "pooled_from" in result:
        where = f"on {result['card']} and pooled by `netcheck engine pool`"
    out = _table(
        "deadline",
        result["deadline"],
        f"{label} {where}, {result['date']}: "
        "D = max(a t_ref, b p99) (1 + coupling) + 2 min(rtt, max_rtt) + slack, a and b from "
        "the honest spread, coupling the benign co-hosting slowdown allowed (docs/capacity.md)",
    )
    if "capacity" in result:
        pooled = ""
        if "pooled_from" in result:
            pooled = "; t(1) pooled, t(2).. and beta of the card with the smallest margin"
        out += "\n" + _table(
            "capacity",
            result["capacity"],
            f"{label}: t(k) = seconds until k identities sharing the card are all done{pooled}",
        )
    return out


def replace_tables(profile_text: str, tables: str) -> str:
    """``profile_text`` with each table of ``tables`` (``[deadline]``, ``[capacity]``, as
    :func:`toml_tables` writes them) put in, editing the document in place with tomlkit:

    - a table the profile has keeps its place, its hand-written comment lines and blank
      lines, and the inline comment of each key (next to the new value); its keys take
      the new values, keys the new table lacks are removed, new keys are added at its
      end; its provenance comment (a line starting with :data:`PROVENANCE_PREFIXES`) is
      replaced by the new one, or the new one is put first;
    - a table the profile lacks is appended;
    - everything else of the file is left byte for byte.

    Raises:
        ValueError: ``profile_text`` or ``tables`` is not TOML, or the profile holds one
            of the names as something other than a table.
    """
    try:
        doc = tomlkit.parse(profile_text)
        new = tomlkit.parse(tables)
    except TOMLKitError as exc:
        raise ValueError(f"cannot update the profile's tables: not TOML ({exc})") from None
    for name, fresh in new.items():
        if not isinstance(fresh, Table):
            continue
        old = doc.get(name)
        if old is None:
            doc.add(name, fresh)
        elif isinstance(old, Table):
            doc[name] = _merged_table(old, fresh)
        else:
            raise ValueError(f"the profile's {name!r} is not a [{name}] table")
    return tomlkit.dumps(doc)


def _merged_table(old: Table, fresh: Table) -> Table:
    """``old`` with ``fresh``'s provenance comment (first) and values (:func:`replace_tables`)."""
    out = tomlkit.table()
    for _, item in fresh.value.body:
        if isinstance(item, Comment):
            out.add(item)
            break
    for key, item in old.value.body:
        if key is None:  # a comment or blank line of the file; its provenance line is replaced
            provenance = isinstance(item, Comment) and item.as_string().strip().startswith(
                PROVENANCE_PREFIXES
            )
            if isinstance(item, Comment | Whitespace) and not provenance:
                out.add(item)
            continue
        if key.key not in fresh:  # the calibration no longer writes it
            continue
        value = fresh.item(key.key)
        if isinstance(value, Item) and item.trivia.comment:  # kept beside the new value
            value.trivia.comment_ws = item.trivia.comment_ws
            value.trivia.comment = item.trivia.comment
        out.add(key.key, value)
    for name in fresh:
        if name not in out:
            out.add(name, fresh.item(name))
    return out


def render_markdown(result: dict[str, Any], command: str) -> str:
    """A markdown page of the result (tables; CPU figures labelled)."""
    cpu = result.get("cpu")
    p = result["profile"]
    pooled = result.get("pooled_from")
    kind = "Pooled calibration" if pooled else "Calibration"
    title = f"# {kind}: {p['name']}" + (" (CPU figures)" if cpu else "")
    lines = [
        title,
        "",
        f"Command: `{command}`",
        "",
        f"Card: {result['card']}; software {result['software']}; date {result['date']}; "
        f"host {result['host']}" + ("." if pooled else f"; wall {result.get('wall_s', 0):.0f} s."),
        "",
        f"Shape: {p['model']} {p['dtype']}, B = {p['batch_size']}, prompt_len "
        f"{p['prompt_len']} (prompt_chars {p.get('prompt_chars')}), "
        f"{p['max_new_tokens']} new tokens.",
        "",
    ]
    if "selftest_passed" in result:
        lines += [f"Quick selftest: {'PASS' if result['selftest_passed'] else 'FAIL'}", ""]
    if pooled:
        lines += _pooled_lines(result)
    times = result["times_s"]
    d = result["deadline"]
    lines += [
        "## Single identity" + (" (all cards' batches pooled)" if pooled else ""),
        "",
        "| t_ref (median) | p99 | min | max | batches |",
        "|---|---|---|---|---|",
        f"| {result['t_ref_s']:.4f} s | {result['p99_s']:.4f} s | {min(times):.4f} s | "
        f"{max(times):.4f} s | {len(times)} |",
        "",
        f"Deadline from the measured spread: a = {d['a']}, b = {d['b']}, coupling "
        f"{d.get('coupling', 0.0)}, slack {d['slack_s']} s, max_rtt {d['max_rtt_s']} s -> D = "
        f"{result['deadline_s_rtt0']:.3f} s at rtt 0, {result['deadline_s_max_rtt']:.3f} s "
        "at max_rtt.",
        "",
    ]
    if "achieved_flops" in result:
        lines += _flops_lines(result)
    if "colocation" in result:
        lines += _colocation_lines(result)
    lines += _capacity_lines(result)
    lines += ["", "## Profile tables", "", "```toml", toml_tables(result).rstrip(), "```", ""]
    return "\n".join(lines)


def _flops_lines(result: dict[str, Any]) -> list[str]:
    return [
        f"Achieved: {result['achieved_flops'] / 1e12:.3g} TFLOP/s of a measured bf16 matmul "
        f"peak of {result['peak_bf16_flops'] / 1e12:.3g} TFLOP/s = "
        f"{100 * result['flops_fraction']:.1f}% ({result['batch_flops'] / 1e12:.3g} TFLOP "
        "per batch)."
        + (
            " Above 100%: the profile's dtype runs faster on this device than the bf16 "
            "matmul that measured the peak (typical of a CPU), so the peak is no ceiling here."
            if result["flops_fraction"] > 1
            else ""
        ),
        "",
    ]


def _colocation_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        "## Co-location: k identities sharing the card",
        "",
        "| k | packing | t(k) median makespan | trials | exact outputs | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["colocation"]:
        t = f"{r['t_s']:.4f} s" if r["t_s"] is not None else "-"
        lines.append(
            f"| {r['k']} | {r['packing']} | {t} | {len(r['makespans_s'])} | "
            f"{'yes' if r.get('exact_outputs') else 'no'} | {r['error'] or ''} |"
        )
    return lines + [""]


def _capacity_lines(result: dict[str, Any]) -> list[str]:
    t_k = result["t_k_s"]
    card = result.get("capacity_card")
    lines = []
    if card:
        lines += [
            f"Capacity from {card}, the card with the smallest margin at the pooled deadline: "
            f"its t(k) and beta (its own t(1) {result['capacity_card_t1_s']:.4f} s); t(1) is "
            "the pooled median, the class's reference for the slowness tests.",
            "",
        ]
    lines += [
        "| "
        + " | ".join(f"t({k + 1})" for k in range(len(t_k)))
        + " | "
        + " | ".join(f"beta({k + 2})" for k in range(len(result["beta"])))
        + " | capacity margin t(2)/D(max_rtt) |",
        "|" + "---|" * (len(t_k) + len(result["beta"]) + 1),
    ]
    margin = result.get("margin")
    verdict = "unmeasured" if margin is None else f"{margin:.2f}"
    lines.append(
        "| " + " | ".join(f"{t:.4f}" for t in t_k) + " | "
        + " | ".join(f"{x:.2f}" for x in result["beta"]) + f" | {verdict} |"
    )  # fmt: skip
    for warning in result.get("warnings") or []:
        lines += ["", f"**Warning: {warning}**"]
    if margin is None or margin < MIN_MARGIN:
        lines += ["", f"**Unsafe for capacity: {UNSAFE_TEXT}.**"]
    elif margin < TARGET_MARGIN:
        lines += ["", f"Margin below the {TARGET_MARGIN} target for shipped GPU profiles."]
    return lines


def _pooled_lines(result: dict[str, Any]) -> list[str]:
    """The per-card table of a pooled result (:mod:`netcheck.engines.calibrate_pool`)."""

    def num(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    d = result["deadline"]
    lines = [
        "## Cards pooled",
        "",
        f"Profile names in the records: {', '.join(result.get('profile_names', []))} "
        f"(the batch fields agree); largest card gap allowed "
        f"{100 * result.get('max_card_gap', 0):g}% from the median of the card medians."
        + (" The same card was allowed more than once." if result.get("same_card_allowed")
           else ""),
        "",
        "| file | card | date | batches | t_ref | p99 | gap | t(2) | D(max_rtt) alone | "
        "margin alone | margin at the pooled D |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for c in result["pooled_from"]:
        lines.append(
            f"| {c['file']} | {c['card']} | {c['date']} | {c['n_batches']} | "
            f"{c['t_ref_s']:.4f} s | {c['p99_s']:.4f} s | {100 * c['gap']:+.1f}% | "
            f"{num(c['t2_s'], '.4f')} | {c['deadline_s_max_rtt_alone']:.3f} s | "
            f"{num(c['margin_alone'], '.3f')} | {num(c['margin_at_pooled_deadline'], '.3f')} |"
        )
    lines += [
        "",
        f"Each card alone: the same rule (coupling {d.get('coupling', 0.0)}, slack "
        f"{d['slack_s']} s, max_rtt {d['max_rtt_s']} s) on that card's batches only.",
        "",
    ]
    if result.get("slowness"):
        lines += [_slowness_line(result["slowness"]), ""]
    return lines


def _slowness_line(s: dict[str, Any]) -> str:
    """The pooled cards' spread against the persistent-slowness floor
    (:func:`netcheck.engines.calibrate_pool.slowness_check`), a warning when the floor
    does not cover the slowest card."""
    text = (
        f"the slowest card ({s['slowest_card']}) has its median at "
        f"{s['slowest_ratio']:.3f} x the pooled t_ref, {s['coupled_ratio']:.3f} x with the "
        f"{100 * s['coupling']:g}% co-hosting allowance, against the coordinator's "
        f"slowness_floor {s['floor']:.10g} (which covers cards up to {s['max_card_ratio']:.3f} x "
        "t_ref)"
    )
    if not s["warn"]:
        return f"Slowness floor: {text}."
    return (
        f"**Warning (slowness floor): {text}: honest co-hosted nodes on this card would "
        "not meet the persistent-slowness test's null (rejected, then judged alone). Raise "
        f"slowness_floor in the coordinator config to at least {s['min_floor']:.2f} (and "
        "pass it here as --slowness-floor), or drop or recalibrate the card.**"
    )
