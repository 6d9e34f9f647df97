"""Schema migrations, driven by alembic from code.

The migration scripts ship inside the package (script_location "forge_record.store:migrations"),
so nothing depends on an alembic.ini at some cwd-relative path, and alembic's fileConfig is
never called: the recorder's logging stays as the app set it up. store/alembic.ini exists only
for developers who run the alembic CLI to write a new revision.

Our version table is `forge_record_alembic_version`, not alembic's default, so a Postgres
database that another alembic-managed app also uses is not mistaken for ours.

An upgrade runs in one transaction that first takes a lock (BEGIN IMMEDIATE on SQLite, an
advisory lock on Postgres): two recorders that start on a fresh store at the same moment
migrate it once, one after the other, instead of racing on CREATE TABLE. Within a process a
threading lock does the same, because alembic's state is global.

Opening a store that is at HEAD needs no alembic: its revision is read with one SELECT, and
alembic is imported only to migrate or to inspect migrations. Importing it and loading the
scripts to find their head took a third of a command's start (0.2 of 0.6 s, `forge-record
sessions`).
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa

from forge_record.errors import StoreError
from forge_record.store import schema
from forge_record.store.engine import show_url, writing

# The newest revision in migrations/versions: what this code expects a store to be at.
# tests/test_migrations.py checks that it is alembic's one head.
HEAD = "0015"
SCRIPT_LOCATION = "forge_record.store:migrations"
VERSION_TABLE = "forge_record_alembic_version"
# The version table holds one row: without alembic's primary key on it, a new SQLite store has
# no index page for it (4 KB of a fresh file; issue 21 item 1). Tables made with one keep it.
VERSION_OPTIONS = {"version_table": VERSION_TABLE, "version_table_pk": False}
_PG_LOCK_KEY = 0x66726563  # "frec": any constant shared by every forge-record process
# alembic keeps its `context` and `op` proxies in module globals: two upgrades must not run
# in one process at once, even on different databases.
_in_process = threading.Lock()


def config() -> Any:
    """An alembic Config built in memory (no ini file is read)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    return cfg


@functools.cache
def _scripts() -> Any:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(config())


def head() -> str:
    """The revision this code expects the database to be at."""
    return HEAD


def heads() -> list[str]:
    """Every head revision; more than one means two branches both added a migration."""
    return list(_scripts().get_heads())


def known(revision: str) -> bool:
    """Whether this code has the migration `revision` (a newer forge-record may not)."""
    from alembic.util import CommandError

    try:
        return _scripts().get_revision(revision) is not None
    except CommandError:
        return False


def current(engine: sa.Engine) -> str | None:
    """The database's revision, or None if it was never migrated (read as alembic reads it:
    the one row of the version table)."""
    with engine.connect() as conn:
        return _revision(conn)


def _revision(conn: sa.Connection) -> str | None:
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return None
    found = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(found) > 1:
        raise StoreError(f"the store is at several revisions at once: {', '.join(found)}")
    return found[0] if found else None


def upgrade(
    engine: sa.Engine,
    revision: str = "head",
    check: Callable[[sa.Connection, str | None], None] | None = None,
) -> None:
    """Bring the database to `revision`, in one locked transaction (see module docstring).

    If the database is not at head once the lock is held, `check(conn, current_revision)`
    runs first and may raise to refuse. It runs under the lock so that it sees what a
    concurrent upgrader committed, not the state before it.
    """
    from alembic import command
    from alembic.util import CommandError

    with _in_process, locked(engine) as conn:
        now = _revision(conn)
        if check is not None and now != head():
            check(conn, now)
        cfg = config()
        cfg.attributes["connection"] = conn  # env.py uses it rather than making an engine
        try:
            command.upgrade(cfg, revision)
        except CommandError as e:  # e.g. the database is at a revision this code never had
            raise StoreError(
                f"cannot migrate store {show_url(engine.url)}: {' '.join(str(e).split())} "
                "(was it written by a newer forge-record?)"
            ) from e
    if now is None and engine.dialect.name == "sqlite":
        _compact_new(engine)


def _compact_new(engine: sa.Engine) -> None:
    """VACUUM a SQLite store the upgrade just made from nothing. Revisions made it table by
    table, copies included, so its schema took 3 pages, most of them empty, and 5 pages were
    free; packed, the schema fits one page (8 KB less in a one-session file, issue 21 item 1).
    Cheap on an empty file, and only an optimisation: a store busy with another opener
    already is left as it is."""
    with engine.connect() as conn:
        try:
            conn.connection.dbapi_connection.execute("VACUUM")  # not inside a transaction
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise


def downgrade(engine: sa.Engine, revision: str) -> None:
    """Take the database back to `revision` (tests, and people who must go back a version)."""
    from alembic import command

    with _in_process, locked(engine) as conn:
        cfg = config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def drift(engine: sa.Engine) -> list[Any]:
    """Differences between the database and schema.py, as alembic's autogenerate sees them.

    Empty when the migrations build exactly the tables schema.py declares.
    """
    from alembic.autogenerate import compare_metadata

    with engine.connect() as conn:
        return compare_metadata(_context(conn), schema.metadata)


@contextlib.contextmanager
def locked(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection inside a transaction that holds the migration lock; commits on exit."""
    with writing(engine).connect() as conn, _sqlite_foreign_keys_off(conn):
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
            yield conn
            if conn.dialect.name == "sqlite" and (
                    bad := conn.exec_driver_sql("PRAGMA foreign_key_check").first()):
                raise StoreError(f"a migration left a row whose parent is gone: {tuple(bad)}")


@contextlib.contextmanager
def _sqlite_foreign_keys_off(conn: sa.Connection) -> Iterator[None]:
    """SQLite: foreign keys off while migrating, as SQLite's own recipe for rebuilding a table
    says. A migration that copies a table others point at (0008: `sessions`) drops the old
    copy, and with foreign keys on that DROP cascade-deletes every exchange. The pragma does
    nothing inside a transaction, so it is set on the driver's connection before BEGIN;
    `locked` checks every foreign key before COMMIT instead."""
    if conn.dialect.name != "sqlite":
        yield
        return
    raw = conn.connection.dbapi_connection
    raw.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        raw.execute("PRAGMA foreign_keys = ON")  # as store.engine set it on connect


def _context(conn: sa.Connection) -> Any:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn, opts=VERSION_OPTIONS)
