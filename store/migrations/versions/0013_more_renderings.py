"""raw Gemini, Chat Completions and Responses requests compressed against their blobs rendered

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05

Why: a raw request frame may start with b"G", b"C" or b"R", the marks of store.wire's
Gemini, OpenAI Chat Completions and Responses renderings: its hint is the request's blobs
rendered in the wire form, which on real Gemini CLI, Qwen Code and Codex sessions stores a
call's raw request in a fraction of the bytes. No table changes; the revision exists so
that older forge-records, which know only the b"W" rendering, refuse the store ("written by
a newer forge-record?") instead of failing on its first such frame.

The downgrade refuses, leaving the store as it was, while any raw request starts with one of
these marks: compressing it again against the plain hint needs its body, which only this version
reads. Export such sessions first, or keep this version.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from forge_record.errors import StoreError

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_RENDERED = sa.text("SELECT count(DISTINCT session_id) FROM exchanges "
                    "WHERE substr(raw_request, 1, 1) IN (:gemini, :chat, :responses)")


def upgrade() -> None:
    pass


def downgrade() -> None:
    marks = {"gemini": b"G", "chat": b"C", "responses": b"R"}
    rendered = op.get_bind().execute(_RENDERED, marks).scalar_one()
    if rendered:
        raise StoreError(
            f"cannot go back below revision 0013: {rendered} sessions have raw requests "
            "compressed against a rendering older forge-records do not know; export them "
            "first, or keep this version")
