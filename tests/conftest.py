"""Shared fixtures: the database backends the storage and round tests run on.

``db_url`` is parametrized over SQLite (a temporary file) and PostgreSQL. PostgreSQL
runs when ``NETCHECK_TEST_POSTGRES_URL`` names a server (``scripts/postgres`` starts a
throwaway one and prints its URL; ``.ci/run`` exports it); otherwise that parameter is
skipped with the reason shown. Each PostgreSQL test gets a fresh schema of its own
(``search_path`` in the URL), dropped afterwards, so tests never see each other's rows.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PG_ENV = "NETCHECK_TEST_POSTGRES_URL"
BACKENDS = ("sqlite", "postgresql")


def postgres_base_url() -> str | None:
    """The PostgreSQL server URL for tests, or None when not configured."""
    return os.environ.get(PG_ENV) or None


@contextmanager
def postgres_schema_url(base: str) -> Iterator[str]:
    """A URL on ``base`` whose ``search_path`` is a fresh schema, dropped on exit."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    schema = f"t_{secrets.token_hex(6)}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def backend_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """Yield a fresh database URL for ``backend``; skip PostgreSQL when unconfigured."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'db' / 'netcheck.db'}"
        return
    base = postgres_base_url()
    if base is None:
        pytest.skip(f"PostgreSQL not configured: set {PG_ENV} (scripts/postgres prints one)")
    with postgres_schema_url(base) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL: SQLite file, then PostgreSQL schema."""
    yield from backend_url(request.param, tmp_path)


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    """A fresh PostgreSQL schema URL (skipped when PostgreSQL is not configured)."""
    yield from backend_url("postgresql", tmp_path)


@pytest.fixture
def private_pg() -> Iterator[tuple[str, dict[str, str]]]:
    """(URL, env) of a private PostgreSQL cluster that a test may stop, start or restart
    (tests/pg_support.py); stopped and deleted afterwards."""
    from pg_support import private_cluster

    yield from private_cluster()
