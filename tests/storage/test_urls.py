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


@pytest.mark.parametrize("url", ["postgresql://u:s3cret@h:notaport/x", "postgresql//u:s3cret@h/x"])
def test_a_bad_url_is_named_without_its_credentials(url: str) -> None:
    """A URL with a password that SQLAlchemy refuses was echoed whole (an unknown
    backend), or escaped as a bare ValueError (a port that is no number, a traceback in
    `receipt verify --from-db`): now a ConfigError with the credentials hidden."""
    with pytest.raises(ConfigError, match="not a database URL") as info:
        missing_sqlite_file(url)
    assert "s3cret" not in str(info.value)
