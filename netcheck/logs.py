"""Log line formats of every ``netcheck`` process: text or JSON, ISO-8601 times with zone.

Text: ``2026-11-30T17:13:15.123+00:00 INFO    [label] netcheck.round: message``.
JSON (``netcheck --log-format json ...``): one object per line with ``time`` (the same
ISO-8601 form), ``level``, ``logger``, ``label`` (the process label, e.g. the node's
config name; may be empty), ``message`` and, for an exception, ``exception`` (the
formatted traceback). Times are UTC by default; ``--log-timezone local`` uses the
machine's zone (the offset is always written).

Nodes in log lines: :func:`node_label` writes a node as ``name (ed25519:first 12…)``
when the coordinator's config gives it a name (``node_names``, registered once with
:func:`set_node_names` when the coordinator starts), else as its key prefix, so an
operator finds "rack7-gpu3" in the log, not only a key.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

FORMATS = ("text", "json")

_node_names: dict[str, str] = {}


def set_node_names(names: dict[str, str]) -> None:
    """Register the operator's display names (public key text -> name) for log lines."""
    _node_names.clear()
    _node_names.update(names)


def node_label(node_key: str, width: int = 20) -> str:
    """A node for a log line: ``name (key prefix)`` if it has a display name, else the
    first ``width`` characters of its key."""
    name = _node_names.get(node_key)
    short = node_key[:width]
    return f"{name} ({short})" if name else short


def iso_time(created: float, local: bool = False) -> str:
    """``created`` (Unix seconds) as ISO-8601 with milliseconds and the UTC offset."""
    when = datetime.fromtimestamp(created, UTC)
    if local:
        when = when.astimezone()
    return when.isoformat(timespec="milliseconds")


class TextFormatter(logging.Formatter):
    """``time level [label] logger: message`` with an ISO-8601 time and zone."""

    def __init__(self, label: str = "", local_time: bool = False) -> None:
        prefix = f"[{label}] " if label else ""
        super().__init__(f"%(asctime)s %(levelname)-7s {prefix}%(name)s: %(message)s")
        self.local_time = local_time

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return iso_time(record.created, self.local_time)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (keys in the module docstring)."""

    def __init__(self, label: str = "", local_time: bool = False) -> None:
        super().__init__()
        self.label = label
        self.local_time = local_time

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": iso_time(record.created, self.local_time),
            "level": record.levelname,
            "logger": record.name,
            "label": self.label,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def formatter(fmt: str, label: str = "", local_time: bool = False) -> logging.Formatter:
    """The formatter for ``fmt`` (``text`` or ``json``).

    Raises:
        ValueError: another format name.
    """
    if fmt == "text":
        return TextFormatter(label, local_time)
    if fmt == "json":
        return JsonFormatter(label, local_time)
    raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
