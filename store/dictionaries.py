"""Zstd dictionaries per harness version: what sessions of one agent version repeat.

A team store holds many sessions of the same harness version. They resend the same files,
CLAUDE.md, test and tool output shapes, each in a tool result of its own (so under a blob
name of its own): content addressing cannot share those, and a session's own pack stream
only reaches back into that session. So the first session of a version that packs
MAKE_AFTER plain bytes offers what it packed (at most SIZE) as that version's dictionary,
and every later session's pack streams start from it (a zstd raw-content prefix): a file
another session read already costs what differs.

Contract:
- `key(exchange)` names a harness version from the request headers ("claude-code/2.1.197"),
  falling back to the dialect; correctness never depends on it, only how much is shared.
- A row is written once (`offer`, ON CONFLICT DO NOTHING) and never changed or deleted, so
  readers and writers may cache it by id for as long as they hold the store open.
- `plain(conn, id)` is the prefix a pack group with that dictionary_id was compressed with.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from forge_record.errors import StoreError
from forge_record.lineage.fingerprint import client_of
from forge_record.records import Exchange
from forge_record.store import compression
from forge_record.store.schema import dictionaries

SIZE = 1 << 20  # plain bytes kept: a session's first MB of new content
MAKE_AFTER = SIZE  # offered once full: a shorter session shows too little of the version
_BY_HARNESS = sa.select(dictionaries.c.id, dictionaries.c.data).where(
    dictionaries.c.harness == sa.bindparam("harness"))
_BY_ID = sa.select(dictionaries.c.data).where(dictionaries.c.id == sa.bindparam("id"))


def key(ex: Exchange) -> str:
    client, version = client_of(ex.request_headers)
    return f"{client or ex.dialect}/{version or ''}"


def find(conn: sa.Connection, harness: str) -> tuple[int, bytes] | None:
    """(id, plain bytes) of the harness version's dictionary, if there is one."""
    row = conn.execute(_BY_HARNESS, {"harness": harness}).first()
    return None if row is None else (row.id, compression.decompress(row.data))


def plain(conn: sa.Connection, dictionary_id: int) -> bytes:
    data = conn.scalar(_BY_ID, {"id": dictionary_id})
    if data is None:
        raise StoreError(f"dictionary {dictionary_id} is missing: the store is damaged")
    return compression.decompress(data)


def offer(conn: sa.Connection, harness: str, content: bytes) -> None:
    """Store `content` as the version's dictionary unless it has one already."""
    from forge_record.store.batch import dialect_insert  # batch imports this module

    row = {"harness": harness, "size": len(content), "data": compression.compress(content),
           "created_at": time.time()}
    conn.execute(dialect_insert(conn, dictionaries).on_conflict_do_nothing(
        index_elements=["harness"]), row)
