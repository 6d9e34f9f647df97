"""manifests may name parameters as changes to another call's

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05

Why: a manifest may name a request's parameters as `[base, changes]`, a blob and what changed
from it (store.content.parameters_ref): Codex over its WebSocket sends a new
`previous_response_id` and a clock in `client_metadata` on every call, so its parameters were
a new blob on every call. No table changes; the revision exists so that older forge-records,
which read the parameters reference as one blob name, refuse the store ("written by a newer
forge-record?") instead of failing to read it.

The downgrade refuses, leaving the store as it was, if any manifest names its parameters as
changes: naming them whole again changes the manifest's bytes, which its raw response is
compressed against, so only the writer could do it. Export such sessions first, or keep this
version.
"""

from __future__ import annotations

import orjson
import sqlalchemy as sa
from alembic import op

from forge_record.errors import StoreError
from forge_record.store import compression

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_SESSIONS = sa.text("SELECT DISTINCT session_id FROM exchanges WHERE layout = 2")
_PIECES = sa.text("SELECT segment, record FROM exchanges "
                  "WHERE session_id = :s AND layout = 2 ORDER BY segment, piece")


def upgrade() -> None:
    pass


def downgrade() -> None:
    bind = op.get_bind()
    changed = 0
    for (session_id,) in bind.execute(_SESSIONS).all():
        segments: dict[int, list[bytes]] = {}
        for row in bind.execute(_PIECES, {"s": session_id}):
            segments.setdefault(row.segment, []).append(row.record)
        changed += any(_as_changes(orjson.loads(plain)) for pieces in segments.values()
                       for plain in compression.decode_pieces(pieces))
    if changed:
        raise StoreError(
            f"cannot go back below revision 0012: {changed} sessions have parameters stored "
            "as changes to another call's, which older forge-records cannot read; export them "
            "first, or keep this version")


def _as_changes(manifest: dict) -> bool:
    request = manifest.get("request")
    return request is not None and not isinstance(request["parameters"], str)
