"""manifests may name a system prompt block by block

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04

Why: a manifest names a system prompt of several blocks as a list, one part a block, a small
block written inline (store.content.system_ref): Claude Code's first system block changes on
every call, so a whole-prompt blob was new on every call. No table changes; the revision
exists so that older forge-records, which read the system reference as one blob name, refuse
the store ("written by a newer forge-record?") instead of failing to read it.

The downgrade refuses, leaving the store as it was, if any manifest names its system prompt in
parts: naming it whole again changes the manifest's bytes, which its raw response is
compressed against, so only the writer could do it. Export such sessions first, or keep this
version.
"""

from __future__ import annotations

import orjson
import sqlalchemy as sa
from alembic import op

from forge_record.errors import StoreError
from forge_record.store import compression

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_SESSIONS = sa.text("SELECT DISTINCT session_id FROM exchanges WHERE layout = 2")
_PIECES = sa.text("SELECT segment, record FROM exchanges "
                  "WHERE session_id = :s AND layout = 2 ORDER BY segment, piece")


def upgrade() -> None:
    pass


def downgrade() -> None:
    bind = op.get_bind()
    in_parts = 0
    for (session_id,) in bind.execute(_SESSIONS).all():
        segments: dict[int, list[bytes]] = {}
        for row in bind.execute(_PIECES, {"s": session_id}):
            segments.setdefault(row.segment, []).append(row.record)
        in_parts += any(_in_parts(orjson.loads(plain)) for pieces in segments.values()
                        for plain in compression.decode_pieces(pieces))
    if in_parts:
        raise StoreError(
            f"cannot go back below revision 0011: {in_parts} sessions have system prompts "
            "stored in parts, which older forge-records cannot read; export them first, or "
            "keep this version")


def _in_parts(manifest: dict) -> bool:
    request = manifest.get("request")
    return request is not None and not isinstance(request["system"], str)
