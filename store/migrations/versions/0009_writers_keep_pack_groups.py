"""writers keep each session's pack groups, so gc must hold off their repacks

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

Why: writers now keep `sessions.pack_groups` as they write (store.batch.keep_groups), and
that is exact only because gc's repacks and writers' transactions exclude each other
(store.batch.REPACK_LOCK) and a repack forgets the figures naming its group in its own
transaction. A gc of an older forge-record does neither: against these writers it could leave
a figure naming a group it deleted, which the next gc would trust, taking live blobs of the new
group for unnamed. No table changes; the revision exists so that older forge-records refuse
the store ("written by a newer forge-record?") instead of running such a gc. The downgrade
forgets every kept figure of pack groups (a cache: gc finds them again), so that an older gc
trusts none a writer of this version kept.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    op.execute(sa.text("UPDATE sessions SET pack_groups = NULL"))
