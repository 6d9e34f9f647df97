"""content-addressed exchanges, packs and blobs; recorder heartbeat

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

Why: storing each request whole grows with the square of a session's length (an agent resends
its whole history on every call). From here on an exchange keeps references to content
blobs, stored once per store, plus small deltas; docs/STORAGE.md has the design.

- exchanges.layout says how a row's `record` and raw columns are encoded: 1 for every row
  that exists at upgrade time (whole record and zstd frames, exactly as 0001 wrote them, so
  they read back unchanged and nothing is rewritten), 2 for rows written from now on.
- exchanges.segment and .piece order a session's manifest stream (layout 2).
- packs hold compressed pieces of blob streams; blobs name their bytes in a pack by hash.
- sessions.recorder_pid and .heartbeat_at tell a session still being recorded from one whose
  recorder died (status "interrupted"); both stay NULL on older sessions.

Downgrade rewrites layout-2 rows as layout 1 (decoding them with the store's reader, which
keeps reading layout 2 for as long as forge-record can have written it), then drops what
this revision added, so no exchange is lost going back.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from forge_record.store.migrations.blob_keys import blob_names

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ALTER TABLE, never a batch table copy: on SQLite, dropping the old `sessions`
    # table would cascade-delete every exchange (foreign keys are on during migrations).
    op.add_column("sessions", sa.Column("recorder_pid", sa.Integer(), nullable=True))
    op.add_column("sessions", sa.Column("heartbeat_at", sa.Double(), nullable=True))
    op.add_column(
        "exchanges",
        sa.Column("layout", sa.Integer(), nullable=False, server_default=sa.text("1")),
    )
    op.add_column("exchanges", sa.Column("segment", sa.Integer(), nullable=True))
    op.add_column("exchanges", sa.Column("piece", sa.Integer(), nullable=True))
    op.create_table(
        "packs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("group_id", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_packs")),
    )
    # A blob is read by decoding its group's packs in order.
    op.create_index(op.f("ix_packs__group_id"), "packs", ["group_id"])
    op.create_table(
        "blobs",
        sa.Column("hash", sa.Text(), nullable=False),
        sa.Column("pack_id", sa.Integer(), nullable=False),
        sa.Column("start", sa.Integer(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.Column("touched_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("hash", name=op.f("pk_blobs")),
        # The hash is the key: no second copy of it in an index. pack_id has neither an index
        # nor a foreign key for the same reason; gc reads all blob rows when it sweeps packs.
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    # The reader below is today's, which looks blobs up by key (revision 0007's form).
    blob_names(op, to_key=True)
    _rewrite_as_layout_1(op.get_bind())
    op.drop_table("blobs")
    op.drop_index(op.f("ix_packs__group_id"), table_name="packs")
    op.drop_table("packs")
    # SQLite >= 3.35 drops these columns in place (see upgrade() for why not a batch copy).
    for column in ("piece", "segment", "layout"):
        op.drop_column("exchanges", column)
    for column in ("heartbeat_at", "recorder_pid"):
        op.drop_column("sessions", column)


def _rewrite_as_layout_1(conn: sa.Connection) -> None:
    from forge_record.records import exchange_to_dict
    from forge_record.store import compression, reader
    from forge_record.store.schema import exchanges

    ids = conn.scalars(sa.select(exchanges.c.session_id).distinct().where(exchanges.c.layout == 2))
    for session_id in list(ids):
        rows = [
            {"s": session_id, "q": ex.seq, "new_record": compression.pack(exchange_to_dict(ex)),
             "new_request": compression.compress(ex.raw_request),
             "new_response": compression.compress(ex.raw_response)}
            # Below revision 0005 packs have no dictionary_id (and 0005's downgrade refused
            # if any pack used one).
            for ex in reader.read_session(conn, session_id, raw=True, dictionaries=False)
        ]
        conn.execute(
            exchanges.update()
            .where(exchanges.c.session_id == sa.bindparam("s"),
                   exchanges.c.seq == sa.bindparam("q"), exchanges.c.layout == 2)
            .values(record=sa.bindparam("new_record"), raw_request=sa.bindparam("new_request"),
                    raw_response=sa.bindparam("new_response"), layout=1),
            rows,
        )
