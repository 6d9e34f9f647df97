"""forge_record.store: where recorded sessions live (SQLite by default, or Postgres).

    open_store(url) -> Store        open, migrating SQLite (and an empty Postgres) as needed
    upgrade_store(url)              migrate explicitly (`forge-record db upgrade`)
    Store                           every read and write; the only SQL
    Writer                          a thread that owns a Store for the proxy's event loop
    default_store_url(home)         sqlite:///<home>/traces.db

Nothing outside this package imports sqlalchemy, zstandard or alembic.
"""

from __future__ import annotations

from pathlib import Path

from forge_record.store.store import SECRET_HEADERS, Store, open_store, upgrade_store
from forge_record.store.writer import Writer

__all__ = [
    "SECRET_HEADERS",
    "Store",
    "Writer",
    "default_store_url",
    "open_store",
    "upgrade_store",
]


def default_store_url(home: Path) -> str:
    """The store used when no --db is given: traces.db in the forge-record home folder."""
    return f"sqlite:///{Path(home).expanduser() / 'traces.db'}"
