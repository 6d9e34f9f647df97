"""a finished segment's manifests and raw responses sealed into its first row

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05

Why: once a segment is finished, its writer seals it (store.sealed): the first row's `record`
and `raw_response` hold every manifest and raw response of the segment as one frame each,
marked b"S", and the other rows hold empty ones. No table changes; the revision exists so
that older forge-records, which read each row's own piece and frame, refuse the store
("written by a newer forge-record?") instead of failing on the first sealed segment.

The downgrade refuses, leaving the store as it was, while any segment is sealed: cutting it
back into pieces needs this version's reader. Export such sessions first, or keep this
version.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from forge_record.errors import StoreError

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_SEALED = sa.text("SELECT count(DISTINCT session_id) FROM exchanges "
                  "WHERE substr(record, 1, 1) = :mark")


def upgrade() -> None:
    pass


def downgrade() -> None:
    sealed = op.get_bind().execute(_SEALED, {"mark": b"S"}).scalar_one()
    if sealed:
        raise StoreError(
            f"cannot go back below revision 0014: {sealed} sessions have sealed segments, "
            "which older forge-records do not read; export them first, or keep this version")
