"""The connection side of the read-only queries (:mod:`netcheck.storage.reader`):
the store's engine, read in one transaction per query, errors as :class:`StorageError`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from netcheck.errors import StorageError
from netcheck.storage.store import Store


class ReaderBase:
    """Read-only access to one store's database (its engine, pool and pragmas reused;
    nothing here writes).

    Args:
        store: the coordinator's store.
    """

    def __init__(self, store: Store) -> None:
        engine: Engine = store._engine  # private to the store; only read through here
        self._engine = engine

    @contextmanager
    def _conn(self, action: str) -> Iterator[Connection]:
        try:
            with self._engine.connect() as conn, conn.begin():
                yield conn
        except SQLAlchemyError as exc:
            detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise StorageError(f"dashboard: {action}: {detail}") from exc
