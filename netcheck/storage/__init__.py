"""Database layer: the only place with SQL (SQLAlchemy Core; SQLite or PostgreSQL by URL)."""

from netcheck.storage.store import Store
from netcheck.storage.tables import ReferenceRow

__all__ = ["ReferenceRow", "Store"]
