"""Whether a coordinator could open its database, found without changing anything
(``netcheck coordinator check``): no file, folder or table is created, no schema
upgraded; the reference pool is read if the tables exist.

A SQLite file must be readable and writable, and so must its folder (the WAL journal
lives next to it); a missing file is fine when its folder exists (or can be created)
and is writable, since the first start creates it. PostgreSQL must accept a connection
within ``connect_timeout_s``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from netcheck.errors import DatabaseURLError, StorageError
from netcheck.keys import unwritable_folder
from netcheck.storage.store import Store
from netcheck.storage.tables import reference_prompts

#: How long a PostgreSQL connection may take before the probe gives up (seconds).
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class DatabaseProbe:
    """What the probe found: ``detail`` (one line: which database, in what state) and
    the reference pool (rows of :meth:`~netcheck.storage.Store.reference_pool`; empty
    while the database or its tables do not exist yet)."""

    detail: str
    pool: list[dict[str, Any]] = field(default_factory=list)


def _sqlite_file(database: str) -> str | None:
    """Check a SQLite file and its folder; returns a detail line when the file does not
    exist yet (nothing more to read), None when it exists and may be opened.

    Raises:
        StorageError: the file or its folder is not writable (the fix named).
    """
    path = Path(database).expanduser()
    if not path.exists():
        blocked = unwritable_folder(path.parent)
        if blocked is not None:
            raise StorageError(
                f"SQLite file {path} does not exist and {blocked} is not a writable folder: "
                "make it writable or point `database` elsewhere"
            )
        return f"SQLite file {path} does not exist yet: the first start creates it"
    if not path.is_file():
        raise StorageError(f"{path} is not a file: point `database` at a SQLite file")
    if not os.access(path, os.R_OK | os.W_OK):
        raise StorageError(f"SQLite file {path} is not readable and writable by this user")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise StorageError(
            f"folder {path.parent} is not writable (SQLite keeps its journal next to {path.name})"
        )
    return None


def probe_database(url: str, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> DatabaseProbe:
    """Check that the database at ``url`` could be opened by a coordinator, and read its
    reference pool, changing nothing (module docstring).

    Raises:
        DatabaseURLError: ``url`` is not a URL or names an unsupported backend.
        StorageError: why it could not be opened (not a URL, a file or folder not
            writable, a server unreachable or refusing the login), with the fix where
            one is known.
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is no number
        raise DatabaseURLError(  # not echoed: it may hold a password
            "not a database URL (sqlite:///path/netcheck.db, "
            "postgresql+psycopg://user:password@host/name)"
        ) from None
    backend = parsed.get_backend_name()
    database = parsed.database or ""
    where = (
        f"PostgreSQL database {database!r} at {parsed.host or 'localhost'}:{parsed.port or 5432}"
    )
    if backend == "sqlite":
        if database in ("", ":memory:"):
            return DatabaseProbe("in-memory SQLite: nothing is kept across restarts")
        missing = _sqlite_file(database)
        if missing is not None:
            return DatabaseProbe(missing)
        where = f"SQLite file {Path(database).expanduser()} (file and folder writable)"
    elif backend != "postgresql":
        raise DatabaseURLError(
            f"unsupported database {backend!r}: use sqlite:/// or postgresql+psycopg://"
        )
    store = Store(url, create=False, connect_timeout_s=connect_timeout_s)
    try:
        with store._read("connect") as conn:
            conn.execute(text("SELECT 1"))
            if not inspect(conn).has_table(reference_prompts.name):
                return DatabaseProbe(
                    f"{where}: reachable, no netcheck tables yet (created at start)"
                )
        return DatabaseProbe(f"{where}: opened", store.reference_pool())
    finally:
        store.close()
