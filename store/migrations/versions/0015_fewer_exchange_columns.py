"""no exchanges.status, .http_status, .first_byte_at, .ended_at and .flags

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05

Why: issue 21 asks for a store that costs 150x less than the raw bodies for one session, 300x
for a team, and every exchange row repeats what its record holds. These five columns are
read by nothing: no listing, sum or filter (the viewer, `show` and exports read them from the
records), and they cost a real 150-call Claude Code session ~5 KB in SQLite (`complete` and
two timestamps in every row) and as much in Postgres. Every record holds them (layout 1's
whole record, layout 2's manifest), as 0007 found for `method` and `url`. Postgres drops them
at once (the bytes go as rows are rewritten), SQLite (>= 3.35) in place. The downgrade adds
them back and fills them from the records.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# As 0001 made them (NOT NULL ones with a default only for the moment before the fill).
_COLUMNS = {
    "status": lambda: sa.Column("status", sa.Text(), nullable=False, server_default=""),
    "http_status": lambda: sa.Column("http_status", sa.Integer(), nullable=True),
    "first_byte_at": lambda: sa.Column("first_byte_at", sa.Double(), nullable=True),
    "ended_at": lambda: sa.Column("ended_at", sa.Double(), nullable=True),
    "flags": lambda: sa.Column("flags", sa.JSON(), nullable=False, server_default="[]"),
}


def upgrade() -> None:
    for name in _COLUMNS:
        op.drop_column("exchanges", name)


def downgrade() -> None:
    from forge_record.store import reader

    bind = op.get_bind()
    for column in _COLUMNS.values():
        op.add_column("exchanges", column())
    fill = sa.table("exchanges", *(sa.column(c) for c in ("session_id", "seq")),
                    *(sa.column(c, made().type) for c, made in _COLUMNS.items()))
    update = fill.update().where(fill.c.session_id == sa.bindparam("s"),
                                 fill.c.seq == sa.bindparam("q")).values(
        {c: sa.bindparam(c) for c in _COLUMNS})
    for session_id in bind.scalars(sa.text("SELECT DISTINCT session_id FROM exchanges")).all():
        rows = [{"s": session_id, "q": ex.seq, "status": ex.status,
                 "http_status": ex.http_status, "first_byte_at": ex.first_byte_at,
                 "ended_at": ex.ended_at, "flags": list(ex.flags)}
                for ex in reader.read_session(bind, session_id, raw=False)]
        if rows:
            bind.execute(update, rows)
    if bind.dialect.name == "postgresql":  # SQLite cannot drop a column default
        for name in ("status", "flags"):
            op.alter_column("exchanges", name, server_default=None)
