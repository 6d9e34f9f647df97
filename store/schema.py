"""The tables, as SQLAlchemy Core (no ORM: forge_record.records already is the object model).

One MetaData carries a naming convention so that every constraint and index has a predictable
name and migrations never invent one. Columns that the CLI lists, sums or filters on are real
columns; the full normalized exchange is one zstd-compressed orjson blob (`record`), and the
raw wire bodies are zstd frames of their own. Migrations in `migrations/versions/` must build
exactly these tables; tests/test_migrations.py checks that they agree.
"""

from __future__ import annotations

import sqlalchemy as sa

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s__%(column_0_N_name)s",
    "uq": "uq_%(table_name)s__%(column_0_N_name)s",
    "ck": "ck_%(table_name)s__%(constraint_name)s",
    "fk": "fk_%(table_name)s__%(column_0_N_name)s__%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

# Epoch seconds need a double: a 4-byte float loses whole seconds at today's epoch.
Timestamp = sa.Double

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("harness", sa.Text),
    sa.Column("harness_version", sa.Text),
    sa.Column("argv", sa.JSON, nullable=False),
    sa.Column("cwd", sa.Text),
    sa.Column("user_name", sa.Text),  # `user` is reserved in Postgres
    sa.Column("host", sa.Text),
    sa.Column("tags", sa.JSON, nullable=False),
    sa.Column("started_at", Timestamp, nullable=False, index=True),
    sa.Column("ended_at", Timestamp),
    sa.Column("exit_code", sa.Integer),
    sa.Column("record_version", sa.Integer, nullable=False),
)

exchanges = sa.Table(
    "exchanges",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "session_id", sa.Text, sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("dialect", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("model", sa.Text),
    sa.Column("method", sa.Text, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("http_status", sa.Integer),
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("first_byte_at", Timestamp),
    sa.Column("ended_at", Timestamp),
    sa.Column("input_tokens", sa.Integer),
    sa.Column("output_tokens", sa.Integer),
    sa.Column("cache_read_tokens", sa.Integer),
    sa.Column("cache_write_tokens", sa.Integer),
    sa.Column("tool_calls", sa.Integer, nullable=False),
    sa.Column("flags", sa.JSON, nullable=False),
    sa.Column("record", sa.LargeBinary, nullable=False),  # codec.pack(exchange_to_dict(...))
    sa.Column("raw_request", sa.LargeBinary, nullable=False),  # codec.compress(body)
    sa.Column("raw_response", sa.LargeBinary, nullable=False),
    # Also the index that serves "this session's exchanges in order".
    sa.UniqueConstraint("session_id", "seq"),
)
