"""sessions and exchanges

Revision ID: 0001
Revises:
Create Date: 2026-08-20

Why: the first schema. A session is one run of an agent CLI under the recorder; an exchange is
one model call in it. The columns are what `forge-record sessions` lists and sums without
unpacking anything (model, status, token counts, tool-call count), plus the session key and
order (session_id, seq), which is unique so a retried write cannot duplicate a call. Everything
else about a call lives in `record`, a zstd-compressed orjson document, so the record format
can grow without a migration; the raw wire bodies are kept apart, compressed, so that listing
and exporting never read them unless asked.

This file is a frozen copy of schema.py as it was; later changes get their own revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("harness", sa.Text(), nullable=True),
        sa.Column("harness_version", sa.Text(), nullable=True),
        sa.Column("argv", sa.JSON(), nullable=False),
        sa.Column("cwd", sa.Text(), nullable=True),
        sa.Column("user_name", sa.Text(), nullable=True),
        sa.Column("host", sa.Text(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("ended_at", sa.Double(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("record_version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
    )
    # `forge-record sessions` and "last" read sessions newest first.
    op.create_index(op.f("ix_sessions__started_at"), "sessions", ["started_at"])
    op.create_table(
        "exchanges",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("dialect", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("method", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("first_byte_at", sa.Double(), nullable=True),
        sa.Column("ended_at", sa.Double(), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.Column("cache_read_tokens", sa.Integer(), nullable=True),
        sa.Column("cache_write_tokens", sa.Integer(), nullable=True),
        sa.Column("tool_calls", sa.Integer(), nullable=False),
        sa.Column("flags", sa.JSON(), nullable=False),
        sa.Column("record", sa.LargeBinary(), nullable=False),
        sa.Column("raw_request", sa.LargeBinary(), nullable=False),
        sa.Column("raw_response", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_exchanges__session_id__sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exchanges")),
        sa.UniqueConstraint("session_id", "seq", name=op.f("uq_exchanges__session_id_seq")),
    )


def downgrade() -> None:
    op.drop_table("exchanges")
    op.drop_index(op.f("ix_sessions__started_at"), table_name="sessions")
    op.drop_table("sessions")
