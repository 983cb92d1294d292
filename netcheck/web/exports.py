"""CSV and JSON exports of rounds, verdicts, timings and flags, and their exact inverse.

Formats (``/export/{kind}.csv`` and ``/export/{kind}.json``):

- JSON: ``{"kind": ..., "columns": [...], "types": {column: type}, "rows": [{column:
  value}, ...]}``; values are the database values (JSON columns as JSON). ``type`` is
  ``int``, ``float``, ``bool``, ``json`` or ``text``, from the table definition.
- CSV: a header row of column names, then one line per row. An empty cell is null; a
  ``json`` column (``skipped``, ``timing``, ``summary``, ``extra``, flag evidence) holds
  compact JSON text; booleans are ``true``/``false``; floats are written with Python's
  shortest round-tripping ``repr``. :func:`parse_csv` with the ``types`` turns an export
  back into exactly the database rows (the round-trip is tested).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

KINDS = ("rounds", "verdicts", "timings", "flags")


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
    return str(value)


def to_csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """Rows as CSV text (header first), with the cell encoding described above."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in columns])
    return buf.getvalue()


def to_json(
    kind: str, columns: Sequence[str], types: Mapping[str, str], rows: Sequence[Mapping[str, Any]]
) -> str:
    """Rows as the JSON export document (``types``: column -> int|float|bool|json|text)."""
    return json.dumps(
        {
            "kind": kind,
            "columns": list(columns),
            "types": dict(types),
            "rows": [dict(r) for r in rows],
        },
        default=str,
    )


def parse_cell(text: str, type_name: str) -> Any:
    """Decode one CSV cell back into its database value (``type_name`` as in the export)."""
    if text == "":
        return None
    if type_name == "json":
        return json.loads(text)
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
