"""kept lineage figures and pack groups on the session row

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

Why: at a million exchanges, `sessions` read every listed session back to count its calls
with lineage, and gc decoded every manifest of the store to find the live blobs.
- sessions.lineage: the lineage counts and conversation fingerprints of the session, with the
  number of exchanges they cover (store.kept); `sessions` reads them instead of the session.
- sessions.pack_groups: the pack groups the session's manifests name blobs in, with the number
  of exchanges they cover; gc reads those of the sessions it does not have to decode.
Both are NULL on every existing row and filled when first computed; they are caches, so the
downgrade drops them and loses nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("lineage", sa.JSON(), nullable=True))
    op.add_column("sessions", sa.Column("pack_groups", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("sessions", "pack_groups")
    op.drop_column("sessions", "lineage")
