"""dictionaries per harness version; raw body sizes

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

Why: a team store holds many sessions of one harness version, which repeat the same files,
CLAUDE.md and tool output shapes; no single session's compressor can reach that redundancy.
- `dictionaries`: one row per harness version naming the first bytes of a pack group a first
  session packed (not a copy); later sessions' pack streams start from them
  (docs/STORAGE.md). gc keeps those groups.
- packs.dictionary_id: which dictionary a group's stream starts from; NULL (every existing
  pack) for none, so older packs read as before.
- exchanges.raw_request_size, .raw_response_size: the raw bodies' lengths, so `forge-record db
  stats` compares the store with what it holds without rebuilding bodies; NULL on older rows.
Columns are added in place (no table copy, see 0002). Downgrade drops them: packs written
with a dictionary would not decode without it, so it refuses while any exist.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("exchanges", sa.Column("raw_request_size", sa.Integer(), nullable=True))
    op.add_column("exchanges", sa.Column("raw_response_size", sa.Integer(), nullable=True))
    op.add_column("packs", sa.Column("dictionary_id", sa.Integer(), nullable=True))
    op.create_table(
        "dictionaries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("harness", sa.Text(), nullable=False),
        sa.Column("group_id", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dictionaries")),
        sa.UniqueConstraint("harness", name=op.f("uq_dictionaries__harness")),
    )


def downgrade() -> None:
    bind = op.get_bind()
    used = bind.scalar(sa.text("SELECT count(*) FROM packs WHERE dictionary_id IS NOT NULL"))
    if used:
        raise RuntimeError(
            f"{used} packs are compressed with a dictionary that revision 0004 cannot read; "
            "push the sessions into a new store instead of downgrading")
    op.drop_table("dictionaries")
    op.drop_column("packs", "dictionary_id")
    op.drop_column("exchanges", "raw_response_size")
    op.drop_column("exchanges", "raw_request_size")
