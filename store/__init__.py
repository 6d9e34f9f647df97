"""forge_record.store: where recorded sessions live (SQLite by default, or Postgres).

    open_store(url) -> Store        open, migrating SQLite (and an empty Postgres) as needed
    upgrade_store(url)              migrate explicitly (`forge-record db upgrade`)
    store_revision(url)             (the store's schema revision, the one the code needs)
    Store                           every read and write; the only SQL callers reach
    Writer                          a thread that owns a Store for the proxy's event loop:
                                    batches, spools to disk while the store is down or
                                    misses a deadline (store.deadline), replays what dead
                                    writers left (store.recovery); its interface and
                                    counters are store.sink's
    default_store_url(folder)       sqlite:///<folder>/traces.db (forge_record.paths's)

How bytes are laid out (content-addressed blobs, manifest streams, raw deltas) is in
docs/STORAGE.md. Nothing outside this package imports sqlalchemy, zstandard or alembic.
"""

from __future__ import annotations

from forge_record.paths import default_store_url  # the one definition, re-exported
from forge_record.store.store import (
    SECRET_HEADERS,
    Store,
    StoreUnavailable,
    open_store,
    store_revision,
    upgrade_store,
)
from forge_record.store.writer import Writer

__all__ = [
    "SECRET_HEADERS",
    "Store",
    "StoreUnavailable",
    "Writer",
    "default_store_url",
    "open_store",
    "store_revision",
    "upgrade_store",
]
