"""Database URLs checked before a store is opened (SQLAlchemy's URL parser stays here)."""

from __future__ import annotations

from pathlib import Path

from netcheck.errors import ConfigError
from netcheck.redact import redact_url


def missing_sqlite_file(url: str) -> str | None:
    """The path of the SQLite file ``url`` names when that file does not exist, else None
    (other backends, in-memory SQLite, or an existing file).

    Raises:
        ConfigError: ``url`` is not a database URL (named with its credentials hidden,
            :func:`netcheck.redact.redact_url`), or its port is not a number.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
        why = exc if isinstance(exc, ArgumentError) else "its port is not a number"
        raise ConfigError(f"not a database URL: {redact_url(url)!r} ({why})") from None
    database = parsed.database or ""
    is_file = parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:")
    if is_file and not Path(database).expanduser().exists():
        return database
    return None
