"""The database connection under every store of netcheck/storage: a SQLAlchemy Core 2.x
engine, one write or read transaction per call, and the mapping of every SQLAlchemy
exception to :class:`~netcheck.errors.StorageError`.

SQLite by default (WAL journal, foreign keys on, ``busy_timeout``; write transactions
start with ``BEGIN IMMEDIATE`` so two writers queue instead of failing on lock upgrade);
PostgreSQL is a URL change. A failure that may pass (a lock, a lost connection) is
:class:`~netcheck.errors.StorageUnavailable`, so callers can retry it
(:mod:`netcheck.storage.durable`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

from sqlalchemy import Connection, create_engine, event, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.pool import StaticPool

from netcheck.errors import DatabaseURLError, StorageError, StorageUnavailable
from netcheck.redact import redact_url
from netcheck.storage import migrate
from netcheck.storage.tables import metadata

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5000
#: First key of the PostgreSQL advisory lock that serialises table creation and schema
#: upgrades of one schema across processes (the second key is the schema's name hashed).
#: The deployment locks (:mod:`netcheck.storage.cluster_tables`) hash their first key.
SCHEMA_LOCK = 0x6E63_5344  # "ncSD"


def _describe(exc: SQLAlchemyError) -> str:
    detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    low = detail.lower()
    if "locked" in low or "busy" in low or "lock timeout" in low:
        return f"database is locked ({detail})"
    if ("disk" in low and "full" in low) or "no space" in low:
        return f"disk full ({detail})"
    if isinstance(exc, IntegrityError):
        return f"integrity constraint violated ({detail})"
    return detail


def _transient(exc: SQLAlchemyError) -> bool:
    """True if the same write may succeed later: a lock held elsewhere, or the server
    unreachable or restarting (a lost connection). Constraint violations are not."""
    if isinstance(exc, IntegrityError):
        return False
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def hex_text(value: object) -> object:
    """Bytes as lowercase hex; anything else unchanged (how receipt bytes are stored)."""
    return value.hex() if isinstance(value, bytes | bytearray) else value


def json_ready(value: object) -> object:
    """``value`` for a JSON column: bytes as hex, mappings (text keys) and sequences
    converted all the way down; other values unchanged."""
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value


def _sqlite_read_only(parsed: URL, path: Path, flag: str) -> URL:
    """A SQLite URI URL of ``path`` (absolute, percent-encoded) with ``flag``
    (``mode=ro`` or ``immutable=1``) and ``parsed``'s other query options."""
    name, _, value = flag.partition("=")
    uri = f"file:{quote(str(path.resolve()))}"
    query = {**parsed.query, name: value, "uri": "true"}
    return parsed.set(database=uri, query=query)


def _shown(url: URL) -> str:
    """``url`` quoted for an error message, its credentials (user, password, a
    ``?password=`` parameter) hidden (:func:`netcheck.redact.redact_url`)."""
    return repr(redact_url(url.render_as_string(hide_password=False)))


class Database:
    """A SQLAlchemy engine with netcheck's transaction and error rules, and its tables.

    Args:
        url: SQLAlchemy URL, e.g. ``sqlite:///path/netcheck.db`` (parent directory created),
            ``sqlite://`` (in memory) or ``postgresql+psycopg://...``. Tables are created
            if missing.
        busy_timeout_ms: how long a SQLite write waits for another writer's lock.
        create: False opens the database as it is: no folder or table created, no schema
            upgrade (:mod:`netcheck.storage.probe`, which connects once itself).
        connect_timeout_s: PostgreSQL only: give up connecting after this long.
        read_only: open for reading only (commands that only read, e.g. ``receipt verify
            --from-db``), as ``create=False``; every write raises :class:`StorageError`
            saying so. A SQLite file opens with ``mode=ro``, so a copy on a read-only
            mount or a file this user may not write can be read; where SQLite cannot
            open even that (a WAL database whose ``-shm`` index cannot be created next
            to it), as ``immutable=1`` (:attr:`immutable`). PostgreSQL sessions are
            ``default_transaction_read_only``.

    Raises:
        DatabaseURLError: ``url`` cannot be used (not a URL, unsupported backend, driver
            not installed): a config error.
        StorageError: the database cannot be opened or initialised (unreachable, refused
            login, not a database, folder not creatable).
    """

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        create: bool = True,
        connect_timeout_s: float | None = None,
        read_only: bool = False,
    ) -> None:
        self.url = url
        self.read_only = read_only
        """Opened with ``read_only``: writes raise :class:`StorageError`."""
        self.immutable = False
        """A read-only SQLite file read as unchanging (``immutable=1``): SQLite could not
        open its WAL index; a change made meanwhile by another process would not be seen."""
        create = create and not read_only
        try:
            parsed = make_url(url)
        except (ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
            raise DatabaseURLError(  # not echoed: it may hold a password
                "cannot open database: not a database URL (sqlite:///path/netcheck.db, "
                f"postgresql+psycopg://user:password@host/name): {exc}"
            ) from None
        self.backend: str = parsed.get_backend_name()
        """``sqlite`` or ``postgresql`` (the SQLAlchemy backend name)."""
        self._sqlite = self.backend == "sqlite"
        self._lock_timeout_ms = max(1, int(busy_timeout_ms))
        kwargs: dict[str, Any] = {}
        target: str | URL = url
        if self._sqlite:
            database = parsed.database or ""
            kwargs["connect_args"] = {"check_same_thread": False}
            if database in ("", ":memory:"):
                kwargs["poolclass"] = StaticPool
            elif read_only and "uri" not in parsed.query:  # a file:...?uri=true URL: as given
                path = Path(database).expanduser()
                if not path.is_file():
                    raise StorageError(f"cannot open database {_shown(parsed)}: no file at {path}")
                if not os.access(path, os.R_OK):
                    raise StorageError(
                        f"cannot open database {_shown(parsed)}: {path} is not readable by "
                        "this user"
                    )
                target = _sqlite_read_only(parsed, path, "mode=ro")
            elif create:
                folder = Path(database).expanduser().parent
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StorageError(
                        f"cannot open database {_shown(parsed)}: cannot create its folder "
                        f"{folder}: {exc.strerror or exc}"
                    ) from None
        elif parsed.get_backend_name() == "postgresql":
            # The PostgreSQL analogue of busy_timeout: a write waits this long for a row or
            # table lock held by another transaction, then fails as "database is locked".
            opts = f"-c lock_timeout={self._lock_timeout_ms}"  # 0 would mean forever
            if read_only:
                opts += " -c default_transaction_read_only=on"
            extra = parsed.query.get("options")
            kwargs["connect_args"] = {"options": f"{extra} {opts}" if extra else opts}
            if connect_timeout_s is not None:
                kwargs["connect_args"]["connect_timeout"] = max(1, round(connect_timeout_s))
        try:
            self._engine: Engine = create_engine(target, **kwargs)
            if self._sqlite:
                self._setup_sqlite(self._engine, busy_timeout_ms, read_only)
            if isinstance(target, URL):  # a SQLite file opened read-only
                self._open_sqlite_read_only(parsed, busy_timeout_ms, **kwargs)
            if not create:
                return
            # DDL in a write transaction (SQLite: BEGIN IMMEDIATE): create_all reads the
            # catalogue first, and a deferred transaction that then upgrades to a write
            # fails at once, without waiting, while another connection writes.
            # PostgreSQL: DDL does not queue by itself (two processes creating one table
            # at once: all but one fail on pg_type's unique index), so it runs under an
            # advisory lock of the schema, held to the end of the transaction.
            with self._write("create tables") as conn:
                self._lock_schema(conn)
                metadata.create_all(conn)
            with self._read("check schema") as conn:
                stale = migrate.needs_upgrade(conn)
            if stale:
                with self._write("upgrade schema") as conn:
                    self._lock_schema(conn)
                    migrate.upgrade(conn)
        except StorageError as exc:  # not a database, unreachable: name which one
            raise type(exc)(f"cannot open database {_shown(parsed)}: {exc}") from exc
        except (ArgumentError, ImportError) as exc:  # unknown backend, driver not installed
            raise DatabaseURLError(
                f"cannot open database {_shown(parsed)}: unsupported backend or driver "
                f"not installed ({exc}): use sqlite:/// or postgresql+psycopg://"
            ) from exc
        except Exception as exc:  # anything else while opening
            raise StorageError(f"cannot open database {_shown(parsed)}: {exc}") from exc

    def _open_sqlite_read_only(self, parsed: URL, busy_timeout_ms: int, **kwargs: Any) -> None:
        """Read the catalogue once through ``mode=ro``; when SQLite cannot open the file
        that way (a WAL database on a read-only mount, no ``-shm`` next to it), reopen it
        as ``immutable=1``."""
        try:
            with self._engine.connect() as conn:
                conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar()
            return
        except OperationalError as exc:  # read-only mount: "unable to open database file";
            # a folder this user may not write: "attempt to write a readonly database"
            if "unable to open" not in str(exc) and "readonly database" not in str(exc):
                raise
        self._engine.dispose()
        path = Path(parsed.database or "").expanduser()
        self._engine = create_engine(_sqlite_read_only(parsed, path, "immutable=1"), **kwargs)
        self._setup_sqlite(self._engine, busy_timeout_ms, True)
        with self._engine.connect() as conn:  # fails here, at open, if this cannot read it
            conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar()
        self.immutable = True
        log.warning(
            "%s: SQLite cannot open its WAL index (read-only folder): reading it as an "
            "unchanging file (immutable=1); a copy is fine, a live database may read wrong",
            path,
        )

    def _lock_schema(self, conn: Connection) -> None:
        """PostgreSQL: take the transaction-level advisory lock of the current schema's
        DDL (:data:`SCHEMA_LOCK`, the schema's name hashed), waiting up to
        :data:`~netcheck.storage.migrate.SCHEMA_LOCK_WAIT_MS` for another process creating or upgrading the same
        tables; the rest of the transaction keeps the ordinary lock timeout. SQLite:
        nothing (``BEGIN IMMEDIATE`` already queues writers)."""
        if self.backend == "postgresql":
            conn.execute(text(f"SET LOCAL lock_timeout = {int(migrate.SCHEMA_LOCK_WAIT_MS)}"))
            conn.execute(
                text("SELECT pg_advisory_xact_lock(:k, hashtext(current_schema()))"),
                {"k": SCHEMA_LOCK},
            )
            conn.execute(text(f"SET LOCAL lock_timeout = {self._lock_timeout_ms}"))

    @staticmethod
    def _setup_sqlite(engine: Engine, busy_timeout_ms: int, read_only: bool = False) -> None:
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
            cur = dbapi_conn.cursor()
            if not read_only:  # the journal mode is kept in the file: a write
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("netcheck_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except SQLAlchemyError as exc:
            kind = StorageUnavailable if _transient(exc) else StorageError
            raise kind(f"{action}: {_describe(exc)}") from exc

    @contextmanager
    def _write(self, action: str) -> Iterator[Connection]:
        """One write transaction; commits on success, rolls back on any exception.

        Raises:
            StorageError: opened ``read_only`` (nothing is tried), or the write failed.
        """
        if self.read_only:
            raise StorageError(
                f"{action}: needs to write, but the database was opened read-only (a "
                "command that only reads); use a command that writes, on a writable database"
            )
        with self._errors(action), self._engine.connect() as conn:
            conn = conn.execution_options(netcheck_write=True)
            with conn.begin():
                yield conn

    @contextmanager
    def _read(self, action: str) -> Iterator[Connection]:
        with self._errors(action), self._engine.connect() as conn, conn.begin():
            yield conn

    def close(self) -> None:
        """Release all pooled connections."""
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
