"""The tables, as SQLAlchemy Core (no ORM: forge_record.records already is the object model).

One MetaData carries a naming convention so that every constraint and index has a predictable
name and migrations never invent one. Columns that the CLI lists, sums or filters on are real
columns. Migrations in `migrations/versions/` must build exactly these tables;
tests/test_migrations.py checks that they agree.

How an exchange's bytes are kept depends on its `layout` (docs/STORAGE.md has the design):
- 1 (rows written by revision 0001): `record` is the whole normalized exchange, orjson then
  zstd; `raw_request` and `raw_response` are zstd frames of the bodies.
- 2 (content-addressed): `record` is this exchange's piece of its session segment's manifest
  stream (`segment`, `piece` order the stream); the manifest names `blobs` for the system
  prompt, tools, parameters, messages and answer. `raw_request` and `raw_response` are
  store.delta frames against the exchange's raw parent and its blobs.
A blob's bytes live in a `packs` row: one piece of a compressed stream per session segment
(`group_id`), so a blob is read by decoding its group's pieces up to its pack; a finished
group is one row, its stream sealed as one frame (store.seal). A group's
stream may start from a `dictionaries` row (revision 0005, `packs.dictionary_id`): content
earlier sessions of the same harness version packed, which the next ones repeat.
"""

from __future__ import annotations

import sqlalchemy as sa

from forge_record.identity import blob_key, blob_key_name

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

LAYOUT_RECORD = 1
LAYOUT_CONTENT = 2

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
    # Which process records the session, and when it last said so: a session with no end
    # whose recorder is gone is `interrupted` (see store.status).
    sa.Column("recorder_pid", sa.Integer),
    sa.Column("heartbeat_at", Timestamp),
    # Kept figures (revision 0006, store.kept): what reading the session back would give,
    # stored with the number of exchanges they cover, so they count only while the session
    # holds exactly that many. `lineage`: the counts `sessions` prints and the fingerprints it
    # filters on; `pack_groups`: the pack groups its manifests name blobs in (for gc), kept
    # by the writer as it inserts the exchanges (store.batch.keep_groups).
    sa.Column("lineage", sa.JSON),
    sa.Column("pack_groups", sa.JSON),
    # SQLite: keyed by the id itself, not by a rowid and an index holding every id again
    # (revision 0008).
    sqlite_with_rowid=False,
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
    # No `method` and `url` (dropped by revision 0007): nothing sums or filters on them, the
    # record has both, and the same URL in every row cost a 150-call session ~8 KB.
    # No `status`, `http_status`, `first_byte_at`, `ended_at` and `flags` either (revision
    # 0015), for the same reasons: ~5 KB of a real 150-call session.
    # The time a spooled exchange is known by when it is replayed (store.batch).
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("input_tokens", sa.Integer),
    sa.Column("output_tokens", sa.Integer),
    sa.Column("cache_read_tokens", sa.Integer),
    sa.Column("cache_write_tokens", sa.Integer),
    sa.Column("tool_calls", sa.Integer, nullable=False),
    sa.Column("record", sa.LargeBinary, nullable=False),
    sa.Column("raw_request", sa.LargeBinary, nullable=False),
    sa.Column("raw_response", sa.LargeBinary, nullable=False),
    sa.Column("layout", sa.Integer, nullable=False, server_default=sa.text("1")),
    sa.Column("segment", sa.Integer),
    sa.Column("piece", sa.Integer),
    # The raw bodies' lengths (revision 0005; NULL on older rows): what `db stats` compares
    # the store's size with, without rebuilding any body.
    sa.Column("raw_request_size", sa.Integer),
    sa.Column("raw_response_size", sa.Integer),
    # Also the index that serves "this session's exchanges in order".
    sa.UniqueConstraint("session_id", "seq"),
)

packs = sa.Table(
    "packs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("group_id", sa.BigInteger, nullable=False, index=True),
    sa.Column("size", sa.Integer, nullable=False),  # plain bytes
    sa.Column("data", sa.LargeBinary, nullable=False),
    # gc leaves young groups alone: their writer may still append to them (encoder.PACK_IDLE).
    sa.Column("created_at", Timestamp, nullable=False),
    # The dictionary the group's stream starts from (store.dictionaries), the same on every
    # pack of a group; NULL for none. No foreign key: dictionaries are never deleted.
    sa.Column("dictionary_id", sa.Integer),
)

# Zstd dictionaries, one per harness version (revision 0005, store.dictionaries): the first
# `size` plain bytes of pack group `group_id`, what a session of that version packed first,
# which later sessions' pack streams start from. Not a copy: gc keeps that group as it is.
# Rows are written once and never changed.
dictionaries = sa.Table(
    "dictionaries",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("harness", sa.Text, nullable=False, unique=True),
    sa.Column("group_id", sa.BigInteger, nullable=False),
    sa.Column("size", sa.Integer, nullable=False),  # plain bytes
    sa.Column("created_at", Timestamp, nullable=False),
)

class BlobName(sa.types.TypeDecorator):
    """A blob name (`c1:` + 32 hex digits, identity.blob_name) kept as its 16 bytes (revision
    0007): Python code binds and reads names, the database holds keys."""

    impl = sa.LargeBinary
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: sa.Dialect) -> bytes | None:
        return None if value is None else blob_key(value)

    def process_result_value(self, value: bytes | None, dialect: sa.Dialect) -> str | None:
        return None if value is None else blob_key_name(bytes(value))


blobs = sa.Table(
    "blobs",
    metadata,
    sa.Column("hash", BlobName, primary_key=True),
    # No foreign key and no index: gc reads every row anyway, and on SQLite an index on it
    # would hold a second copy of every hash (~10% of a session's bytes).
    sa.Column("pack_id", sa.Integer, nullable=False),
    sa.Column("start", sa.Integer, nullable=False),
    sa.Column("length", sa.Integer, nullable=False),
    # When a writer last wrote or reused it, in whole seconds (SQLite keeps those in 4 bytes):
    # gc spares recently touched blobs even if no committed exchange names them yet (see
    # store.gc).
    sa.Column("touched_at", Timestamp, nullable=False),
    # SQLite: the hash is the table's key, not a second copy in an index beside a rowid.
    sqlite_with_rowid=False,
)

# One outcome per session (`forge-record label`); labelling again merges into the row.
labels = sa.Table(
    "labels",
    metadata,
    sa.Column(
        "session_id", sa.Text, sa.ForeignKey("sessions.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("reward", sa.Double),
    sa.Column("note", sa.Text),
    sa.Column("tags", sa.JSON, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    # SQLite: keyed by the session id itself, not by a rowid and an index (revision 0007).
    sqlite_with_rowid=False,
)

# Rollout sessions of `forge-record serve` (revision 0004, store.gateway): what any replica
# needs to serve a session's calls and its control API. The token itself is never stored,
# only its sha256; `calls` hands out the session's exchange numbers across replicas;
# `finish_seq` is the order sessions finished in, the trainers' cursor.
gateway_sessions = sa.Table(
    "gateway_sessions",
    metadata,
    sa.Column(
        "session_id", sa.Text, sa.ForeignKey("sessions.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("token_hash", sa.Text, nullable=False, unique=True),
    sa.Column("meta", sa.JSON, nullable=False),
    sa.Column("group_id", sa.Text, index=True),
    sa.Column("keyed_by", sa.Text),
    sa.Column("calls", sa.Integer, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("exit_code", sa.Integer),
    sa.Column("finished_at", Timestamp),
    sa.Column("finish_seq", sa.Integer, unique=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sqlite_with_rowid=False,  # as labels (revision 0007)
)
