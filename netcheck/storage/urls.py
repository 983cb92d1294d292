"""Database URLs checked before a store is opened (SQLAlchemy's URL parser stays here)."""

from __future__ import annotations

from pathlib import Path

from netcheck.errors import ConfigError


def missing_sqlite_file(url: str) -> str | None:
    """The path of the SQLite file ``url`` names when that file does not exist, else None
    (other backends, in-memory SQLite, or an existing file).

    Raises:
        ConfigError: ``url`` is not a database URL.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"not a database URL: {url!r} ({exc})") from None
    database = parsed.database or ""
    is_file = parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:")
    if is_file and not Path(database).expanduser().exists():
        return database
    return None
