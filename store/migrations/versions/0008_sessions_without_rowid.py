"""SQLite's sessions WITHOUT ROWID

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

Why: issue 21 asks for 150x on disk for one session in a fresh SQLite file. `sessions` is
keyed by its text id, so SQLite kept it as a rowid table plus an index holding every id
again: one more 4 KB page in a fresh store, a second copy of every session id in a full one.
As a WITHOUT ROWID table the id is the table's key (0007 did the same to `labels` and
`gateway_sessions`). The table is copied and renamed, its index made again. `exchanges`,
`labels` and `gateway_sessions` point at it, so this needs migrate.locked's foreign keys off
(with them on, dropping the old table cascade-deletes every exchange); their rows still
name the same ids, and locked checks every foreign key before it commits. Postgres has no
rowid: nothing changes there. The downgrade copies it back into a rowid table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _copy("sessions", rowid=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _copy("sessions", rowid=True)


def _copy(table: str, rowid: bool) -> None:
    """Copy `table` into a table of the same columns and constraints, with or without a rowid,
    and put the copy in its place with the same indexes."""
    found = sa.text("SELECT type, sql FROM sqlite_master WHERE tbl_name = :t AND sql IS NOT NULL")
    rows = op.get_bind().execute(found, {"t": table}).all()
    create = next(sql for kind, sql in rows if kind == "table")
    columns = create[create.index("("):].strip()
    if columns.upper().endswith("WITHOUT ROWID"):
        columns = columns[: -len("WITHOUT ROWID")].rstrip()
    copy = f"{table}_0008"
    op.execute(f"CREATE TABLE {copy} {columns}" + ("" if rowid else " WITHOUT ROWID"))
    op.execute(f"INSERT INTO {copy} SELECT * FROM {table}")
    op.execute(f"DROP TABLE {table}")
    op.execute(f"ALTER TABLE {copy} RENAME TO {table}")
    for kind, sql in rows:
        if kind == "index":
            op.execute(sql)
