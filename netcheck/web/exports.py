"""CSV and JSON exports of rounds, verdicts, timings and flags, and their exact inverse.

Formats (``/export/{kind}.csv`` and ``/export/{kind}.json``):

- JSON: ``{"kind": ..., "columns": [...], "types": {column: type}, "rows": [{column:
  value}, ...]}``; values are the database values (JSON columns as JSON), strict JSON:
  a non-finite float (inf, NaN), in a column or inside a JSON column, is ``null`` (as in
  the admin API; Python wrote ``Infinity``, which ``JSON.parse`` and ``jq`` refuse). ``type`` is
  ``int``, ``float``, ``bool``, ``json``, ``text`` or ``time`` (ISO 8601 UTC text), from
  the table definition.
- CSV: a header row of column names, then one line per row. An empty cell is null; a
  ``json`` column (``skipped``, ``timing``, ``summary``, ``extra``, flag evidence) holds
  compact JSON text; booleans are ``true``/``false``; floats are written with Python's
  shortest round-tripping ``repr``. A text cell that a spreadsheet would run as a
  formula (starting with ``=``, ``+``, ``-``, ``@``, a tab, CR or LF; a node chooses its
  error text, docs/dashboard.md "Exports") is written with a ``'`` in front, and so is
  one already starting with ``'``. :func:`parse_csv` with the ``types`` turns an export
  back into exactly the database rows (the round-trip is tested), taking that ``'`` off.

What :func:`presented` adds to the stored columns, so an export reads like every other
surface (docs/glossary.md):

- times: each Unix-seconds column (``started_at``, ``finished_at``, ``recorded_at``,
  ``created_at``, ``reviewed_at``) holds ISO 8601 text in UTC with microseconds
  (``2026-11-30T18:28:01.424897+00:00``, type ``time``), followed by the stored number
  as ``<column>_unix`` (type ``float``, seconds since 1970 UTC, exact) for
  re-analysis;
- names: ``node_name`` after ``node_key`` (verdicts, timings) and ``node_names`` after
  ``node_keys`` (flags, a JSON list in the same order): the operator's display name
  (``node_names`` in the coordinator config), empty/null when none;
- review history (flags): the last column, ``reviews`` (type ``json``), lists every
  review of the flag oldest first as ``{"state", "by", "at", "at_unix", "note"}``, ``at``
  in ISO 8601 UTC and ``at_unix`` the stored number, like the time columns; ``[]`` for a
  flag never reviewed. ``review``, ``reviewed_by``, ``reviewed_at`` and ``review_note``
  stay: they repeat the latest entry.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

KINDS = ("rounds", "verdicts", "timings", "flags")
#: Unix-seconds columns of each export, written as ISO 8601 UTC (and ``<col>_unix``).
TIME_COLUMNS = {
    "rounds": ("started_at", "finished_at"),
    "verdicts": ("recorded_at",),
    "flags": ("created_at", "reviewed_at"),
}


def iso_utc(ts: Any) -> str | None:
    """Unix seconds as ISO 8601 UTC with microseconds; None stays None."""
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts):
        return None
    return _dt.datetime.fromtimestamp(float(ts), _dt.UTC).isoformat(timespec="microseconds")


def presented(
    kind: str, columns: Sequence[str], types: Mapping[str, str],
    rows: Sequence[Mapping[str, Any]], names: Mapping[str, str],
) -> tuple[list[str], dict[str, str], list[dict[str, Any]]]:  # fmt: skip
    """The export's columns, types and rows: the stored ones with ISO 8601 times (and the
    exact number as ``<col>_unix``) and the nodes' display names (``names``: key ->
    name); see the module docstring."""
    times = set(TIME_COLUMNS.get(kind, ()))
    cols: list[str] = []
    out_types = dict(types)
    for c in columns:
        cols.append(c)
        if c in times:
            cols.append(f"{c}_unix")
            out_types[c], out_types[f"{c}_unix"] = "time", "float"
        elif c == "node_key":
            cols.append("node_name")
            out_types["node_name"] = "text"
        elif c == "node_keys":
            cols.append("node_names")
            out_types["node_names"] = "json"
    out = []
    for row in rows:
        r = dict(row)
        for c in times & set(columns):
            r[f"{c}_unix"] = r.get(c)
            r[c] = iso_utc(r.get(c))
        if "node_key" in r:
            r["node_name"] = names.get(str(r["node_key"]))
        if isinstance(r.get("node_keys"), list):
            r["node_names"] = [names.get(str(k)) for k in r["node_keys"]]
        if isinstance(r.get("reviews"), list):
            r["reviews"] = [_review_entry(e) for e in r["reviews"]]
        out.append(r)
    return cols, out_types, out


def _review_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One review of the ``reviews`` history: ``at`` as ISO 8601 UTC, then ``at_unix``."""
    return {
        "state": entry.get("state"),
        "by": entry.get("by"),
        "at": iso_utc(entry.get("at")),
        "at_unix": entry.get("at"),
        "note": entry.get("note"),
    }


#: First characters that make a spreadsheet (Excel, LibreOffice, Google Sheets) read a
#: cell as a formula (OWASP "CSV injection"), and the quote that marks an escaped cell.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "'")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def to_csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """Rows as CSV text (header first), with the cell encoding described above."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in columns])
    return buf.getvalue()


def _strict(value: Any) -> Any:
    """``value`` with every non-finite float, at any depth, as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def to_json(
    kind: str, columns: Sequence[str], types: Mapping[str, str], rows: Sequence[Mapping[str, Any]]
) -> str:
    """Rows as the JSON export document (``types``: column -> int|float|bool|json|text),
    strict JSON (non-finite floats as ``null``)."""
    return json.dumps(
        {
            "kind": kind,
            "columns": list(columns),
            "types": dict(types),
            "rows": [_strict(dict(r)) for r in rows],
        },
        default=str,
        allow_nan=False,
    )


def parse_cell(text: str, type_name: str) -> Any:
    """Decode one CSV cell back into its database value (``type_name`` as in the export);
    a text cell's leading ``'`` (formula escape, see the module docstring) is taken off."""
    if text == "":
        return None
    if text.startswith("'"):  # no number, time or JSON text starts with one
        return text[1:]
    if type_name == "json":
        return json.loads(text)
    if type_name == "time":  # ISO 8601 text; the exact number is in <column>_unix
        return text
    if type_name == "int":
        return int(text)
    if type_name == "float":
        return float(text)
    if type_name == "bool":
        return text == "true"
    return text


def parse_csv(text: str, types: Mapping[str, str]) -> tuple[list[str], list[dict[str, Any]]]:
    """Read an export's CSV back: ``(columns, rows)`` with database-typed values.

    ``types`` maps column -> ``int``/``float``/``bool``/``json``/``text`` (the ``types`` of
    the JSON export, or :meth:`netcheck.storage.reader.Reader.column_types`); columns it does
    not name stay text.
    """
    reader = csv.reader(io.StringIO(text))
    header = next(reader, [])
    rows = [
        {c: parse_cell(cell, types.get(c, "text")) for c, cell in zip(header, line, strict=True)}
        for line in reader
    ]
    return header, rows
