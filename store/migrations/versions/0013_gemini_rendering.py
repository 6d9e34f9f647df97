"""raw Gemini requests compressed against their blobs rendered as Gemini CLI writes them

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05

Why: a raw request frame may start with b"G", the mark of store.wire's Gemini rendering: its
hint is the request's blobs rendered in the Gemini API's wire form, which on real Gemini CLI
sessions stores a call's raw request in a fraction of the bytes (a tool result's object is
its body's bytes again, not JSON text escaped once more). No table changes; the revision
exists so that older forge-records, which know only the b"W" rendering, refuse the store
("written by a newer forge-record?") instead of failing on its first Gemini frame.

The downgrade refuses, leaving the store as it was, while any raw request starts with b"G":
compressing it again against the plain hint needs its body, which only this version reads.
Export such sessions first, or keep this version.
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
                    "WHERE substr(raw_request, 1, 1) = :mark")


def upgrade() -> None:
    pass


def downgrade() -> None:
    rendered = op.get_bind().execute(_RENDERED, {"mark": b"G"}).scalar_one()
    if rendered:
        raise StoreError(
            f"cannot go back below revision 0013: {rendered} sessions have raw Gemini requests "
            "compressed against a rendering older forge-records do not know; export them "
            "first, or keep this version")
