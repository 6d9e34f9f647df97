"""Zstd dictionaries per harness version: what sessions of one agent version repeat.

A team store holds many sessions of the same harness version. They resend the same files,
CLAUDE.md, test and tool output shapes, each in a tool result of its own (so under a blob
name of its own): content addressing cannot share those, and a session's own pack stream
only reaches back into that session. So the first session of a version whose pack group
holds SIZE plain bytes, or that ends with MAKE_AFTER, offers that group as the version's
dictionary, and every later session's pack streams start from the group's first bytes (a
zstd raw-content prefix): a file another session read already costs what differs.

A dictionary is not a copy: its row names the group and how many of its plain bytes it
takes, so it costs nothing on disk. gc never drops or repacks such a group.

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
from forge_record.store.schema import dictionaries, packs

SIZE = 1 << 20  # plain bytes a dictionary takes at most
MAKE_AFTER = 128 << 10  # a session that ends having packed less shows too little
_BY_HARNESS = sa.select(dictionaries.c.id).where(dictionaries.c.harness == sa.bindparam("harness"))
_BY_ID = sa.select(dictionaries.c.group_id, dictionaries.c.size).where(
    dictionaries.c.id == sa.bindparam("id"))
_GROUP = sa.select(packs.c.data).where(packs.c.group_id == sa.bindparam("group")).order_by(
    packs.c.id)
GROUPS = sa.select(dictionaries.c.group_id)


def key(ex: Exchange) -> str:
    client, version = client_of(ex.request_headers)
    return f"{client or ex.dialect}/{version or ''}"


def find(conn: sa.Connection, harness: str) -> tuple[int, bytes] | None:
    """(id, plain bytes) of the harness version's dictionary, if there is one."""
    found = conn.scalar(_BY_HARNESS, {"harness": harness})
    return None if found is None else (found, plain(conn, found))


def plain(conn: sa.Connection, dictionary_id: int) -> bytes:
    row = conn.execute(_BY_ID, {"id": dictionary_id}).first()
    if row is None:
        raise StoreError(f"dictionary {dictionary_id} is missing: the store is damaged")
    out = bytearray()
    pieces = conn.execute(_GROUP, {"group": row.group_id}).scalars()
    for piece in compression.decode_pieces(pieces):  # a dictionary's group has none itself
        out += piece
        if len(out) >= row.size:
            break
    if len(out) < row.size:
        raise StoreError(f"dictionary {dictionary_id} lacks pack bytes: the store is damaged")
    return bytes(out[: row.size])


def offer(conn: sa.Connection, harness: str, group: int, size: int) -> None:
    """Make the first `size` plain bytes of pack group `group` the version's dictionary,
    unless it has one already."""
    from forge_record.store.batch import dialect_insert  # batch imports this module

    row = {"harness": harness, "group_id": group, "size": size, "created_at": time.time()}
    conn.execute(dialect_insert(conn, dictionaries).on_conflict_do_nothing(
        index_elements=["harness"]), row)
