"""labels: how a session turned out

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Why: recording is for training, and training wants outcomes. `forge-record label SESSION
--reward R --tag K=V --note TEXT` records one per session, and every export carries it (the
`reward` slot of calls, trajectories, Parquet and OTel; --label and --tag select on it).
One row per session: labelling again merges into it (a new reward or note replaces the old,
tags are added or overwritten, what is not given is kept), so `reward` always means the
latest judgement and no reader has to pick among rows. The row goes with its session.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "labels",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("reward", sa.Double(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_labels__session_id__sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_labels")),
    )


def downgrade() -> None:
    op.drop_table("labels")
