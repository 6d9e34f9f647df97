"""smaller rows: blob names as 16 bytes

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
"""

from __future__ import annotations

from alembic import op

from forge_record.store.migrations.blob_keys import blob_names

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    blob_names(op, to_key=True)


def downgrade() -> None:
    blob_names(op, to_key=False)
