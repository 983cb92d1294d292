"""Text that a node controls, made safe to store, log and print.

A node chooses the ``reason`` of its ``error`` and ``bye`` messages (docs/protocol.md
§5). Such text reaches the database (PostgreSQL refuses NUL in text columns: one NUL
made every round's outcome unrecordable), log files (a newline forges a log line, an
escape sequence drives the operator's terminal) and tables printed with rich (whose
``[...]`` markup made links or crashed the CLI). :func:`untrusted` is applied where
such text enters the coordinator, so everything downstream holds printable text only.
"""

from __future__ import annotations

UNTRUSTED_LIMIT = 200
"""Characters kept of one piece of node text (the rest is cut with an ellipsis)."""


def untrusted(text: str, limit: int = UNTRUSTED_LIMIT) -> str:
    """``text`` with every non-printable character escaped as Python would (``\\x00``,
    ``\\n``, ``\\x1b``), then cut to ``limit`` characters.

    Printable Unicode (letters, punctuation, spaces) is kept as it is; rich markup is
    not escaped here (print it with ``rich.text.Text``).
    """
    safe = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return safe if len(safe) <= limit else safe[: limit - 1] + "…"
