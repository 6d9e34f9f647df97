"""smaller rows: blob names as 16 bytes; Postgres keeps compressed columns in the row; SQLite's
labels and gateway_sessions WITHOUT ROWID; no exchanges.method and .url

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

Why: issue 21 asks for a store that costs 150x less than the raw bodies for one session, 300x
for a team. A blob row named its blob with 35 characters (`c1:` and 32 hex digits), and the
primary key held them again in Postgres: ~50 KB of a 150-call session's 315 KB there.
- blobs.hash: the name's 16 bytes (identity.blob_key; schema.BlobName turns them back into
  the name for the code), bytea in Postgres, BLOB in SQLite. Postgres converts in place; SQLite
  copies the table (WITHOUT ROWID, no foreign key points at it) and renames the copy. The
  downgrade turns keys back into names the same way.
- Postgres: exchanges.record, raw_request, raw_response and packs.data are zstd already, so
  the columns are STORAGE EXTERNAL (never pglz-compressed: it only spent the server's CPU)
  and the tables' toast_tuple_target is 8160 (a row goes to TOAST only when it would not fit
  a page, not from 2 KB on: a 2-8 KB raw keyframe or pack cost a TOAST chunk, its index
  entry and a pointer). Both apply to rows written from now on; nothing is rewritten.
- SQLite: `labels` and `gateway_sessions` are keyed by a session id, so they become WITHOUT
  ROWID tables: no separate index beside the table for the key (one 4 KB page each in a
  fresh store; a second copy of every key in a full one). They are copied and renamed, with
  their indexes made again; no foreign key points at them. `sessions` stays as it is: copying
  it would cascade-delete every exchange (see 0002).
- exchanges.method, exchanges.url: dropped. Every record holds both (layout 1's whole record,
  layout 2's manifest); nothing sums or filters on them, and the same URL in every row cost
  a 150-call session ~8 KB. Postgres drops them at once (the bytes go as rows are rewritten),
  SQLite (>= 3.35) in place. The downgrade adds them back and fills them from the records.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from forge_record.store.migrations.blob_keys import blob_names

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


_KEYED_BY_SESSION = ("labels", "gateway_sessions")
_COMPRESSED = {"exchanges": ("record", "raw_request", "raw_response"), "packs": ("data",)}


def upgrade() -> None:
    blob_names(op, to_key=True)
    if op.get_bind().dialect.name == "sqlite":
        for table in _KEYED_BY_SESSION:
            _sqlite_rowid(table, keep=False)
    if op.get_bind().dialect.name == "postgresql":
        for table, columns in _COMPRESSED.items():
            for column in columns:
                op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STORAGE EXTERNAL")
            op.execute(f"ALTER TABLE {table} SET (toast_tuple_target = 8160)")
    op.drop_column("exchanges", "url")
    op.drop_column("exchanges", "method")


def downgrade() -> None:
    _method_and_url_from_records()
    if op.get_bind().dialect.name == "postgresql":
        for table, columns in _COMPRESSED.items():
            for column in columns:
                op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STORAGE EXTENDED")
            op.execute(f"ALTER TABLE {table} RESET (toast_tuple_target)")
    if op.get_bind().dialect.name == "sqlite":
        for table in _KEYED_BY_SESSION:
            _sqlite_rowid(table, keep=True)
    blob_names(op, to_key=False)


def _sqlite_rowid(table: str, keep: bool) -> None:
    """Copy `table` into a rowid table (`keep`) or a WITHOUT ROWID one of the same columns
    and constraints, and put the copy in its place with the same indexes."""
    bind = op.get_bind()
    found = sa.text("SELECT type, sql FROM sqlite_master WHERE tbl_name = :t AND sql IS NOT NULL")
    rows = bind.execute(found, {"t": table}).all()
    create = next(sql for kind, sql in rows if kind == "table")
    columns = create[create.index("("):].strip()
    if columns.upper().endswith("WITHOUT ROWID"):
        columns = columns[: -len("WITHOUT ROWID")].rstrip()
    copy = f"{table}_0007"
    op.execute(f"CREATE TABLE {copy} {columns}" + ("" if keep else " WITHOUT ROWID"))
    op.execute(f"INSERT INTO {copy} SELECT * FROM {table}")
    op.execute(f"DROP TABLE {table}")
    op.execute(f"ALTER TABLE {copy} RENAME TO {table}")
    for kind, sql in rows:
        if kind == "index":
            op.execute(sql)


def _method_and_url_from_records() -> None:
    """exchanges.method and .url as 0006 had them, read back from every record."""
    from forge_record.store import reader

    bind = op.get_bind()
    # NOT NULL, as 0006 had them; the default only covers the moment before the fill.
    op.add_column("exchanges", sa.Column("method", sa.Text(), nullable=False, server_default=""))
    op.add_column("exchanges", sa.Column("url", sa.Text(), nullable=False, server_default=""))
    fill = sa.text("UPDATE exchanges SET method = :method, url = :url "
                   "WHERE session_id = :s AND seq = :q")
    for session_id in bind.scalars(sa.text("SELECT DISTINCT session_id FROM exchanges")).all():
        rows = [{"method": ex.method, "url": ex.url, "s": session_id, "q": ex.seq}
                for ex in reader.read_session(bind, session_id, raw=False)]
        if rows:
            bind.execute(fill, rows)
    if bind.dialect.name == "postgresql":  # SQLite cannot drop a column default
        for column in ("method", "url"):
            op.alter_column("exchanges", column, server_default=None)
