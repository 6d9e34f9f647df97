"""make_engine(url): a synchronous SQLAlchemy engine for a store URL, or a StoreError.

Supported: sqlite:///PATH (sqlite:// alone is an in-memory store, for tests), and
postgresql:// or postgresql+psycopg:// (both use psycopg 3). Anything else is refused here, with
a one-line message that never shows a password.

SQLite connections are set up for one writer thread plus readers in other processes:
WAL (readers never block the writer), synchronous=NORMAL (a commit survives the recorder
being killed; only an OS crash or power loss can drop the last few commits), foreign keys on,
and a busy timeout. SQLAlchemy, not the sqlite3 module, emits BEGIN, so DDL is transactional
and writers can ask for BEGIN IMMEDIATE (see `writing()`).

Every store operation has a deadline, so a database that hangs makes it fail instead of
waiting forever. Postgres connections give up connecting after CONNECT_TIMEOUT and send TCP
keepalives (a server that vanished is noticed). A recording engine (`recording=True`, the
store writer's) also has the server end a statement after STATEMENT_TIMEOUT, a wait for a
lock after LOCK_TIMEOUT (a table another session holds locked), and a transaction left idle
after IDLE_TIMEOUT (the one a writer gave up on when its answer never came: it must not keep
its locks). What no server-side timeout can end, a call whose answer never arrives (a relay
that went silent), the writer ends itself (store.deadline). SQLite waits BUSY_TIMEOUT_MS for
a lock. The writer spools what missed its deadline (store.writer).
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.pool import StaticPool

from forge_record.errors import StoreError

BUSY_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT = 10  # seconds
STATEMENT_TIMEOUT = 15  # seconds; the writer's own deadline is a little longer (store.deadline)
LOCK_TIMEOUT = 5
IDLE_TIMEOUT = 60
# A pooled Postgres connection idle longer than this is pinged before it is used again (one
# used moments ago is not: a ping on every checkout cost the writer a round trip a call).
PING_IDLE = 2.0  # seconds
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
               "keepalives_count": 3}
# A new file's page size (an existing file keeps its own: SQLite sets it when the first page
# is written), SQLite's smallest. A store's rows are compressed pieces of a few hundred bytes
# to a kilobyte (a call's new blobs; an exchange row with its manifest and raw-body frames),
# and a page leaves unused what of the next row does not fit: a real Claude Code call's
# exchange row (~600 bytes, its headers in the manifest) took a 1 KB page to itself. Every
# table and index also takes at least a page. A real session recorded by `run` takes 379.9
# KB at 1 KB pages and 334.8 at 512 bytes; the generated 150-call session 323.6 KB at 4 KB,
# 282.6 at 1 KB, 268.3 at 512 bytes (docs/BENCHMARKS.md, "512-byte SQLite pages").
SQLITE_PAGE_SIZE = 512
_SQLITE_PRAGMAS = (
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",  # first, so the WAL switch below can wait
    f"PRAGMA page_size = {SQLITE_PAGE_SIZE}",  # before the WAL switch, which writes page 1
    # A new file can give pages back: sealing a pack group (store.seal) frees what its pieces
    # took, and gc what it deleted; each then runs `PRAGMA incremental_vacuum`. It costs a
    # pointer-map page per ~100 pages (1%). An existing file keeps its mode.
    "PRAGMA auto_vacuum = INCREMENTAL",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA foreign_keys = ON",
)
_BEGIN_OPTION = "forge_record_sqlite_begin"
SUPPORTED = "sqlite:///PATH, postgresql://... or postgresql+psycopg://..."


def make_engine(url: str, *, recording: bool = False) -> Engine:
    """An engine for `url`; StoreError if the URL is malformed, unsupported or unusable.
    `recording`: the statement, lock and idle timeouts of the store writer (see above);
    commands that read or migrate a whole store have none.

    Nothing connects yet, except that a SQLite file's parent directory is created.
    """
    parsed = parse_url(url)
    # Read the scheme ourselves: asking SQLAlchemy for the driver would import the dialect.
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite" and driver in ("", "pysqlite"):
        return _sqlite_engine(parsed)
    if backend == "postgresql" and driver in ("", "psycopg"):
        # A bare postgresql:// would mean psycopg2 to SQLAlchemy; we use psycopg 3.
        return _postgres_engine(parsed.set(drivername="postgresql+psycopg"), recording)
    raise StoreError(f"unsupported store URL {show_url(url)}: use {SUPPORTED}")


def sqlite_file(url: str) -> Path | None:
    """The file of a sqlite:///PATH store (None for other stores and in-memory ones)."""
    parsed = parse_url(url)
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).expanduser()


def parse_url(url: str) -> URL:
    try:
        return make_url(url)
    except (sa.exc.ArgumentError, ValueError) as e:
        raise StoreError(f"malformed store URL {show_url(url)}: use {SUPPORTED}") from e


def show_url(url: str | URL) -> str:
    """The URL as it may appear in messages and logs: password masked, quoted."""
    if isinstance(url, URL):
        return repr(url.render_as_string(hide_password=True))
    try:
        return show_url(make_url(url))
    except (sa.exc.ArgumentError, ValueError):
        return repr(re.sub(r"(//[^/:@]*:)[^@/]*@", r"\1***@", url))


def writing(engine: Engine) -> Engine:
    """The same engine (same pool), whose transactions take SQLite's write lock up front.

    A deferred transaction that reads and then writes can fail at once with "database is
    locked" when another process committed meanwhile; BEGIN IMMEDIATE waits (busy_timeout)
    instead. No effect on Postgres.
    """
    return engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})


def _sqlite_engine(url: URL) -> Engine:
    database = url.database or ""
    if database in ("", ":memory:"):
        # One shared connection, usable from the writer thread: the only way an in-memory
        # database is the same database for every caller.
        engine = sa.create_engine(
            url, poolclass=StaticPool, connect_args={"check_same_thread": False}
        )
    else:
        _make_parent(url, Path(database).expanduser())
        engine = sa.create_engine(url.set(database=str(Path(database).expanduser())))
    sa.event.listen(engine, "connect", _sqlite_connect)
    sa.event.listen(engine, "begin", _sqlite_begin)
    return engine


def _make_parent(url: URL, path: Path) -> None:
    """Make the store's folder, and the file itself private (0600) before SQLite creates it:
    it holds every prompt and file the agent sent. SQLite gives its -wal and -shm files the
    database file's mode."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_RDONLY, 0o600))
    except OSError as e:
        raise StoreError(f"cannot open store {show_url(url)}: {e.strerror or e}") from e


def _sqlite_connect(dbapi_conn, _record) -> None:
    # Stop the sqlite3 module from issuing BEGIN/COMMIT on its own; _sqlite_begin does it.
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    try:
        for pragma in _SQLITE_PRAGMAS:
            _execute_when_free(cursor, pragma)
    finally:
        cursor.close()


def _execute_when_free(cursor, statement: str) -> None:
    """Run `statement`, retrying while the database is locked, up to the busy timeout.
    SQLite gives up at once, without its busy handler, when switching a fresh file to WAL
    while another connection does the same: recorders that start together on a new store."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute(statement)
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _sqlite_begin(conn) -> None:
    mode = conn.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


def _postgres_engine(url: URL, recording: bool) -> Engine:
    connect_args: dict[str, object] = {"connect_timeout": CONNECT_TIMEOUT, **_KEEPALIVES}
    if recording:
        connect_args["options"] = " ".join(
            f"-c {name}={seconds * 1000}" for name, seconds in (
                ("statement_timeout", STATEMENT_TIMEOUT), ("lock_timeout", LOCK_TIMEOUT),
                ("idle_in_transaction_session_timeout", IDLE_TIMEOUT)))
    try:
        engine = sa.create_engine(url, connect_args=connect_args)
    except ImportError as e:
        raise StoreError(
            "Postgres stores need psycopg 3: pip install 'forge-record[postgres]'"
        ) from e
    _ping_when_idle(engine)
    return engine


def _ping_when_idle(engine: Engine) -> None:
    """The recorder outlives server restarts: a connection that sat in the pool for more than
    PING_IDLE seconds is pinged as it is checked out, and replaced if the ping fails (what
    pool_pre_ping does on every checkout). One that dies within PING_IDLE of its last use
    fails the statement instead; the store then reports itself unavailable, as it would have
    for a server that died mid-transaction, and the pool makes a new connection."""

    def checkin(dbapi_conn, record) -> None:
        record.info["idle_since"] = time.monotonic()

    def checkout(dbapi_conn, record, proxy) -> None:
        if time.monotonic() - record.info.get("idle_since", 0.0) > PING_IDLE:
            try:
                engine.dialect.do_ping(dbapi_conn)
            except engine.dialect.loaded_dbapi.Error as e:
                raise sa.exc.DisconnectionError(str(e)) from e

    sa.event.listen(engine, "checkin", checkin)
    sa.event.listen(engine, "checkout", checkout)


def give_back_pages(conn: sa.Connection) -> None:
    """On a SQLite file made with auto_vacuum = INCREMENTAL (a new file: _SQLITE_PRAGMAS),
    truncate its free pages when this transaction commits; nothing on other files and
    stores. Sealing pack groups (store.seal) and gc call it after deleting."""
    if conn.dialect.name == "sqlite":
        # On the driver's cursor, stepped to its end: each step of the pragma frees one
        # page, and SQLAlchemy closes a statement that returns no columns after one step.
        cursor = conn.connection.cursor()
        try:
            cursor.execute("PRAGMA incremental_vacuum").fetchall()
        finally:
            cursor.close()
