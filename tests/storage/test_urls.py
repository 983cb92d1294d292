"""Database URLs checked before a store opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from netcheck.errors import ConfigError
from netcheck.storage.urls import missing_sqlite_file


def test_missing_sqlite_file_named(tmp_path: Path) -> None:
    """A SQLite URL whose file does not exist names that file; an existing one is fine."""
    db = tmp_path / "x.db"
    assert missing_sqlite_file(f"sqlite:///{db}") == str(db)
    db.touch()
    assert missing_sqlite_file(f"sqlite:///{db}") is None
    assert missing_sqlite_file("sqlite://") is None


def test_not_a_url_is_a_config_error() -> None:
    """Text that is no database URL is refused with the URL named."""
    with pytest.raises(ConfigError, match="not a database URL"):
        missing_sqlite_file("no url at all")
