"""segments that go on from an earlier segment; manifest streams from a shipped dictionary

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

Why: two changes to what exchange rows hold, no table changes. The revision exists so that
older forge-records refuse the store ("written by a newer forge-record?") instead of failing
to read it:
- A writer that let a session's encoder go (`serve` with more rollouts open than its
  encoders' budget holds) starts the session's next segment from its last exchange, in the
  segment before (store.segments, `tail`): such a manifest's parent, raw parent and token
  parent are in another segment, and a reader before 0010 reading that exchange alone only
  decodes its own segment.
- Manifest streams start from a zstd dictionary shipped with the package
  (store/manifests-1.dict), which their frame names by id; before 0010 a reader loaded none.

The downgrade re-encodes every manifest stream that names a dictionary without it (the
plain manifests, which raw responses are compressed against, stay the same bytes). It
refuses, leaving the store as it was, if any exchange goes on from another segment: making
those self-contained means re-encoding raw bodies and token blobs, which only the writer
does. Export such sessions first, or keep this version.
"""

from __future__ import annotations

import orjson
import sqlalchemy as sa
from alembic import op

from forge_record.errors import StoreError
from forge_record.store import compression, content

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_SESSIONS = sa.text("SELECT DISTINCT session_id FROM exchanges WHERE layout = 2")
_PIECES = sa.text("SELECT segment, piece, seq, record FROM exchanges "
                  "WHERE session_id = :s AND layout = 2 ORDER BY segment, piece")
_REWRITE = sa.text("UPDATE exchanges SET record = :record WHERE session_id = :s AND seq = :seq")


def upgrade() -> None:
    pass


def downgrade() -> None:
    bind = op.get_bind()
    resumed = 0
    for (session_id,) in bind.execute(_SESSIONS).all():
        segments: dict[int, list] = {}
        for row in bind.execute(_PIECES, {"s": session_id}):
            segments.setdefault(row.segment, []).append(row)
        goes_on = False
        for rows in segments.values():
            plains = compression.decode_pieces(r.record for r in rows)
            seqs = {r.seq for r in rows}
            goes_on |= any(content.parent(orjson.loads(p)) not in (None, *seqs) for p in plains)
            if compression.trained_id(rows[0].record):
                stream = compression.Stream(table_log=compression.MANIFEST_TABLE_LOG)
                bind.execute(_REWRITE, [{"record": stream.piece(p), "s": session_id,
                                         "seq": r.seq} for r, p in zip(rows, plains, strict=True)])
        resumed += goes_on
    if resumed:
        raise StoreError(
            f"cannot go back below revision 0010: {resumed} sessions have exchanges that go on "
            "from an earlier segment, which older forge-records cannot read one by one; export "
            "them first, or keep this version")
