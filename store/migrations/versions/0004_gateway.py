"""gateway sessions: rollout sessions of `forge-record serve`

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Why: `forge-record serve` runs as replicas in front of a policy server, and any replica must
serve any call and any control request of any rollout session. So what a session is beyond
its `sessions` row lives here, not in one process: the sha256 of its token (the token itself
is never stored), the trainer's metadata and group, how its calls named it, the exchange
numbers handed out so far (replicas share one sequence per session), and how and in what
order it finished (`finish_seq`, the cursor a trainer pulls trajectories by).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gateway_sessions",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("token_hash", sa.Text(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("group_id", sa.Text(), nullable=True),
        sa.Column("keyed_by", sa.Text(), nullable=True),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.Column("finish_seq", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_gateway_sessions__session_id__sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_gateway_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_gateway_sessions__token_hash")),
        sa.UniqueConstraint("finish_seq", name=op.f("uq_gateway_sessions__finish_seq")),
    )
    op.create_index(op.f("ix_gateway_sessions__group_id"), "gateway_sessions", ["group_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_gateway_sessions__group_id"), table_name="gateway_sessions")
    op.drop_table("gateway_sessions")
