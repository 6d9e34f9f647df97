"""What a store costs: its size on disk by part, and against the raw bodies it holds.

`measure(store)` returns a JSON-ready dict (`forge-record db stats` prints it):
- `on_disk`: SQLite: the database file and its WAL; Postgres: every table of the store with
  its TOAST, free-space and visibility maps and its indexes.
- `parts`: bytes on disk by part. Manifests and raw request and response frames are their
  stored lengths; the rest of the exchanges table is `summary columns and row overhead`.
  Packs, the blob index (the `blobs` table, which is its own index), dictionaries and
  `indexes` (every other index) are what their relations take; `other` is the rest (sessions,
  labels, the schema, free pages).
- `raw`: the raw bodies' lengths as written (exchanges.raw_*_size, revision 0005); rows
  written before have none, counted in `raw_unknown`, and the ratio is then a lower bound.
- `harness_versions`: per (harness, version) of the sessions: sessions, exchanges, raw bytes
  and the bytes of their exchange rows' manifests and raw frames. Content packs and
  dictionaries are shared by every session that names them, so they count per store only.
"""

from __future__ import annotations

import os
from typing import Any

import sqlalchemy as sa

from forge_record.store.engine import sqlite_file
from forge_record.store.schema import exchanges, metadata, sessions

_ROWS = sa.select(
    sa.func.count(),
    sa.func.coalesce(sa.func.sum(sa.func.length(exchanges.c.record)), 0),
    sa.func.coalesce(sa.func.sum(sa.func.length(exchanges.c.raw_request)), 0),
    sa.func.coalesce(sa.func.sum(sa.func.length(exchanges.c.raw_response)), 0),
    sa.func.coalesce(sa.func.sum(exchanges.c.raw_request_size + exchanges.c.raw_response_size), 0),
    sa.func.count().filter(exchanges.c.raw_request_size.is_(None)),
)
_STORED = (sa.func.length(exchanges.c.record) + sa.func.length(exchanges.c.raw_request)
           + sa.func.length(exchanges.c.raw_response))
_BY_HARNESS = sa.select(
    sessions.c.harness, sessions.c.harness_version,
    sa.func.count(sa.distinct(sessions.c.id)), sa.func.count(exchanges.c.id),
    sa.func.coalesce(sa.func.sum(exchanges.c.raw_request_size + exchanges.c.raw_response_size), 0),
    sa.func.count(exchanges.c.id).filter(exchanges.c.raw_request_size.is_(None)),
    sa.func.coalesce(sa.func.sum(_STORED), 0),
).select_from(sessions.outerjoin(exchanges, exchanges.c.session_id == sessions.c.id)).group_by(
    sessions.c.harness, sessions.c.harness_version
).order_by(sessions.c.harness, sessions.c.harness_version)


def measure(conn: sa.Connection, url: str) -> dict[str, Any]:
    count, manifests, requests, responses, raw, unknown = conn.execute(_ROWS).one()
    relations, indexes, on_disk = _sizes(conn, url)
    parts = {
        "manifests": manifests,
        "packs": relations.get("packs", 0),
        "raw requests": requests,
        "raw responses": responses,
        "blob index": relations.get("blobs", 0),
        "summary columns and row overhead": max(
            0, relations.get("exchanges", 0) - manifests - requests - responses),
        "indexes": indexes,
        "dictionaries": relations.get("dictionaries", 0),
    }
    parts["other"] = max(0, on_disk - sum(parts.values()))
    return {
        "store": url, "sessions": conn.scalar(sa.select(sa.func.count()).select_from(sessions)),
        "exchanges": count, "on_disk": on_disk, "raw": raw, "raw_unknown": unknown,
        "ratio": round(raw / on_disk, 1) if on_disk else None, "parts": parts,
        "harness_versions": [
            {"harness": h, "version": v, "sessions": n, "exchanges": e, "raw": r,
             "raw_unknown": u, "rows": rows}
            for h, v, n, e, r, u, rows in conn.execute(_BY_HARNESS)],
    }


def _sizes(conn: sa.Connection, url: str) -> tuple[dict[str, int], int, int]:
    """(bytes by table, not counting indexes other than a table's own key; bytes of the
    other indexes; the whole store)."""
    if conn.dialect.name == "postgresql":
        return _postgres_sizes(conn)
    return _sqlite_sizes(conn, url)


def _postgres_sizes(conn: sa.Connection) -> tuple[dict[str, int], int, int]:
    tables = sa.inspect(conn).get_table_names()
    ours = [t for t in tables if t in metadata.tables or t.startswith("forge_record")]
    rows = conn.execute(sa.text(
        "SELECT t, pg_table_size(t::regclass), pg_indexes_size(t::regclass) "
        "FROM unnest(CAST(:tables AS text[])) AS t"), {"tables": ours}).all()
    # The blob index is the blobs table's primary key: it counts as the blob index.
    tables = {t: size + (index if t == "blobs" else 0) for t, size, index in rows}
    indexes = sum(index for t, _, index in rows if t != "blobs")
    return tables, indexes, sum(size + index for _, size, index in rows)


def _sqlite_sizes(conn: sa.Connection, url: str) -> tuple[dict[str, int], int, int]:
    path = sqlite_file(url)
    if path is not None and path.exists():  # the file and its WAL, as they are on disk
        wal = path.with_name(path.name + "-wal")
        on_disk = os.path.getsize(path) + (os.path.getsize(wal) if wal.exists() else 0)
    else:
        on_disk = (conn.exec_driver_sql("PRAGMA page_count").scalar()
                   * conn.exec_driver_sql("PRAGMA page_size").scalar())
    kinds = dict(conn.exec_driver_sql("SELECT name, type FROM sqlite_schema").all())
    try:
        by_name = conn.exec_driver_sql(
            "SELECT name, sum(pgsize) FROM dbstat GROUP BY name").all()
    except sa.exc.OperationalError:  # SQLite built without dbstat: the total only
        return {}, 0, on_disk
    tables = {n: s for n, s in by_name if kinds.get(n) == "table"}
    indexes = sum(s for n, s in by_name if kinds.get(n) == "index")
    return tables, indexes, on_disk
