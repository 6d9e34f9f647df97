"""raw Gemini and Chat Completions requests compressed against their blobs rendered

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05

Why: a raw request frame may start with b"G" or b"C", the marks of store.wire's Gemini and
OpenAI Chat Completions renderings: its hint is the request's blobs rendered in the wire
form, which on real Gemini CLI and Qwen Code sessions stores a call's raw request in a
fraction of the bytes. No table changes; the revision exists so that older forge-records,
which know only the b"W" rendering, refuse the store ("written by a newer forge-record?")
instead of failing on its first such frame.

The downgrade refuses, leaving the store as it was, while any raw request starts with either
mark: compressing it again against the plain hint needs its body, which only this version
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
                    "WHERE substr(raw_request, 1, 1) IN (:gemini, :chat)")


def upgrade() -> None:
    pass


def downgrade() -> None:
    rendered = op.get_bind().execute(_RENDERED, {"gemini": b"G", "chat": b"C"}).scalar_one()
    if rendered:
        raise StoreError(
            f"cannot go back below revision 0013: {rendered} sessions have raw requests "
            "compressed against a rendering older forge-records do not know; export them "
            "first, or keep this version")
