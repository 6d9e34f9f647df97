"""Revision 0007's change of blobs.hash, shared with 0002's downgrade: that downgrade reads
sessions back with today's reader, which reads blob keys, so it turns names into keys first."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

_PREFIX = "c1:"


def blob_names(op: Any, to_key: bool) -> None:
    """blobs.hash as 16-byte keys (`to_key`), or back as names, rows included."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        if to_key:
            op.execute(f"ALTER TABLE blobs ALTER COLUMN hash TYPE bytea USING decode("
                       f"substr(hash, {len(_PREFIX) + 1}), 'hex')")
        else:
            op.execute(f"ALTER TABLE blobs ALTER COLUMN hash TYPE text USING "
                       f"'{_PREFIX}' || encode(hash, 'hex')")
        return
    # SQLite has neither a column type change nor (before 3.41) unhex(): copy the rows through
    # a function of this connection into a new table, then swap the tables.
    raw = bind.connection.dbapi_connection
    if to_key:
        raw.create_function("forge_blob_key", 1, lambda n: bytes.fromhex(n[len(_PREFIX):]),
                            deterministic=True)
    else:
        raw.create_function("forge_blob_key", 1, lambda k: _PREFIX + bytes(k).hex(),
                            deterministic=True)
    op.create_table(
        "blobs_0007",
        sa.Column("hash", sa.LargeBinary() if to_key else sa.Text(), nullable=False),
        sa.Column("pack_id", sa.Integer(), nullable=False),
        sa.Column("start", sa.Integer(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.Column("touched_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("hash", name=op.f("pk_blobs")),
        sqlite_with_rowid=False,
    )
    op.execute("INSERT INTO blobs_0007 (hash, pack_id, start, length, touched_at) SELECT "
               "forge_blob_key(hash), pack_id, start, length, touched_at FROM blobs")
    op.drop_table("blobs")
    op.rename_table("blobs_0007", "blobs")
