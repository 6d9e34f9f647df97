"""Store: sessions and exchanges in SQLite or Postgres. The only module callers hold.

Contract:
- open_store(url) returns a Store whose schema is at migrate.head(), or raises StoreError with
  a one-line message (StoreUnavailable if a Postgres server did not answer). SQLite stores
  migrate themselves on open (a file store has one user, who just upgraded forge-record). A
  Postgres store may be shared by several machines and versions, so it is upgraded only on
  purpose (`forge-record db upgrade`, i.e. upgrade_store) -- except a database with no tables
  at all, which is set up on first use because there is nothing an upgrade could break.
- Every write is one transaction, committed before the method returns; `write(items)` puts a
  whole batch in one. Writes from threads of one process are serialized (the encoders of
  store.segments keep per-session state); several processes may write at once.
- Exchanges are stored content-addressed (store.batch, docs/STORAGE.md) and read back equal,
  raw bodies byte for byte.
- Secret headers (SECRET_HEADERS) never reach the database, even if a caller forgot to drop
  them.
- Read errors and write errors surface as StoreError (SessionNotFound for a missing session,
  StoreUnavailable when the database did not answer and trying later may work).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from forge_record.errors import SessionNotFound, StoreError
from forge_record.records import Exchange, Session
from forge_record.redact.headers import SECRET_HEADERS
from forge_record.store import kept, labels, migrate, reader, seal, summary
from forge_record.store.batch import Writes
from forge_record.store.engine import make_engine, show_url, sqlite_file, writing
from forge_record.store.items import AddExchange, AddSession, EndSession, Item, describe
from forge_record.store.schema import exchanges, sessions
from forge_record.store.segments import Written

log = logging.getLogger("forge_record")

__all__ = [
    "SECRET_HEADERS", "Store", "StoreUnavailable", "fingerprint", "open_store", "store_revision",
    "upgrade_store",
]


# How long Store.close may spend sealing what its writes left open: the segments and pack
# groups of sessions it wrote and did not end (a `serve` replica's rollouts that ended on
# another replica, or go on there) and the stream resumed segments share. A seal of a real
# 150-call segment and its group takes ~50 ms; past this, the rest stays as it is (it reads
# back the same, only bigger), so a stopping replica never waits long on it.
SEAL_AT_CLOSE = 5.0

# Built once: a read of a whole session asks for its row twice (export, show), and working
# out a statement's shape again costs more than running it (see store.reader).
_SESSION_ROW = sa.select(sessions).where(sessions.c.id == sa.bindparam("id"))
_SESSION_ID = sa.select(sessions.c.id).where(sessions.c.id == sa.bindparam("id"))


class StoreUnavailable(StoreError):
    """The database did not answer (refused, dropped, timed out, locked too long)."""


def open_store(url: str, *, recording: bool = False) -> Store:
    """Open (and for SQLite or an empty Postgres database, migrate) the store at `url`.
    `recording`: with the store writer's timeouts (store.engine)."""
    engine = make_engine(url, recording=recording)
    with _opening(engine):
        if migrate.current(engine) != migrate.head():
            sqlite = engine.dialect.name == "sqlite"
            migrate.upgrade(engine, check=None if sqlite else _only_if_empty)
    return Store(engine)


def _only_if_empty(conn: sa.Connection, revision: str | None) -> None:
    """Upgrade check for shared (Postgres) stores: only a database with no tables at all is
    set up on open; any other schema is upgraded on purpose."""
    if revision is None and not sa.inspect(conn).get_table_names():
        return
    if revision is not None and not migrate.known(revision):
        raise StoreError(
            f"store {show_url(conn.engine.url)} is at schema revision {revision}, which this "
            "forge-record does not know (was it written by a newer forge-record?)"
        )
    raise StoreError(
        f"store {show_url(conn.engine.url)} is at schema revision {revision or 'none'}, "
        f"this forge-record needs {migrate.head()}: run `forge-record db upgrade`"
    )


def upgrade_store(url: str) -> tuple[str | None, str]:
    """Migrate the store at `url` to head; returns (revision before, revision after)."""
    engine = make_engine(url)
    try:
        with _opening(engine):
            before = migrate.current(engine)
            migrate.upgrade(engine)
            after = migrate.current(engine)
    finally:
        engine.dispose()
    return before, after


def store_revision(url: str) -> tuple[str | None, str]:
    """(the store's revision, the one this code needs), changing nothing: not even creating
    a SQLite file that does not exist yet."""
    path = sqlite_file(url)
    if path is not None and not path.exists():
        return None, migrate.head()
    engine = make_engine(url)
    try:
        with _opening(engine):
            return migrate.current(engine), migrate.head()
    finally:
        engine.dispose()


@contextlib.contextmanager
def _opening(engine: sa.Engine) -> Iterator[None]:
    try:
        yield
    except StoreError:
        engine.dispose()
        raise
    except SQLAlchemyError as e:
        engine.dispose()
        shared = engine.dialect.name != "sqlite"
        error = StoreUnavailable if shared and unavailable(e) else StoreError
        raise error(f"cannot open store {show_url(engine.url)}: {_reason(e)}") from e


def unavailable(e: SQLAlchemyError) -> bool:
    """Whether trying again later may work: the connection, not the statement, failed."""
    return isinstance(e, (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError,
                          sa.exc.DisconnectionError)) or getattr(e, "connection_invalidated", False)


def _reason(e: SQLAlchemyError) -> str:
    """The driver's message on one line, without SQLAlchemy's SQL echo and help link."""
    text = " ".join(str(getattr(e, "orig", None) or e).split())
    return re.sub(r"\s*\(Background on this error at: \S+\)", "", text)


def fingerprint(engine: sa.Engine) -> str:
    """Names the store in spool file names without writing its password anywhere."""
    full = engine.url.render_as_string(hide_password=False)
    return hashlib.sha256(full.encode()).hexdigest()[:16]


class Store:
    """Reads and writes records. Thread-safe; see forge_record.store.Writer for the proxy path."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._writing = writing(engine)
        self.url = engine.url.render_as_string(hide_password=True)
        self.fingerprint = fingerprint(engine)
        self.dialect = engine.dialect.name
        self._writes = Writes()
        self._write_lock = threading.Lock()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Seal what this Store's writes left open (within SEAL_AT_CLOSE seconds), then let
        the database go. Not while a write is under way: a write still going as its Store
        closes is stuck in a database that does not answer, and close never waits on it."""
        if self._write_lock.acquire(blocking=False):
            try:
                self._writes.closing()
                self._seal(time.monotonic() + SEAL_AT_CLOSE)
            finally:
                self._write_lock.release()
        self._engine.dispose()

    @contextlib.contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except SQLAlchemyError as e:
            error = StoreUnavailable if unavailable(e) else StoreError
            raise error(f"cannot {doing} in store {self.url}: {_reason(e)}") from e

    @contextlib.contextmanager
    def reading(self, doing: str) -> Iterator[sa.Connection]:
        """A connection for store.* helpers (push, gc), with errors as StoreError."""
        with self._guard(doing), self._engine.connect() as conn:
            yield conn

    @contextlib.contextmanager
    def transaction(self, doing: str) -> Iterator[sa.Connection]:
        """A write transaction for store.* helpers, serialized with this Store's writes."""
        with self._write_lock, self._guard(doing), self._writing.begin() as conn:
            yield conn

    # --- writing ------------------------------------------------------------------------

    def write(self, items: list[Item], *, if_absent: bool = False) -> None:
        """Write a batch in one transaction. With `if_absent`, sessions and exchanges that are
        already stored are skipped (replays); otherwise they are errors."""
        if not items:
            return
        doing = _doing(items)
        with self._write_lock:
            try:
                with self._guard(doing), self._writing.begin() as conn:
                    touched = self._writes.apply(conn, items, if_absent=if_absent)
            except BaseException:
                self._writes.forget({i.session_id if not isinstance(i, AddSession)
                                     else i.session.id for i in items})
                raise
            self._writes.committed(touched)
            self._seal()

    def _seal(self, until: float | None = None) -> None:
        """Seal the pack groups and segments writes finished (store.seal), each in a
        transaction of its own, until the monotonic time `until` if given. Best effort: the
        batch that finished them is committed, and what is left as it was reads back the
        same, only bigger. A store that does not answer leaves the rest unsealed."""
        while self._writes.sealable:
            if until is not None and time.monotonic() >= until:
                self._writes.sealable.clear()
                return
            item = self._writes.sealable.pop(0)
            if isinstance(item, Written):
                what, sealing = f"pack group {item.group}", seal.seal
            else:
                what, sealing = (f"session {item.session_id} segment {item.segment}",
                                 seal.seal_segment)
            try:
                with self._guard(f"seal {what}"), self._writing.begin() as conn:
                    sealing(conn, item)
            except StoreUnavailable as e:
                log.warning("forge-record: %s left unsealed: %s", what, e)
                self._writes.sealable.clear()
            except Exception as e:  # noqa: BLE001 - never the write's failure
                log.warning("forge-record: %s left unsealed: %s", what, e)

    def add_session(self, session: Session, recorder_pid: int | None = None) -> None:
        """Add a session recorded by `recorder_pid` (default: this process)."""
        pid = os.getpid() if recorder_pid is None else recorder_pid
        self.write([AddSession(session, pid, time.time())])

    def end_session(self, session_id: str, ended_at: float, exit_code: int | None, *,
                    harness_version: str | None = None) -> None:
        """Record how the session ended, and the harness version if it was learned only
        while recording (None leaves it as it was). SessionNotFound if never added."""
        self.write([EndSession(session_id, ended_at, exit_code, harness_version)])

    def add_exchange(self, session_id: str, exchange: Exchange) -> None:
        """Write one exchange; on return it is committed. Its session must exist."""
        self.write([AddExchange(session_id, exchange)])

    def heartbeat(self, session_ids: list[str]) -> None:
        """Say that the recorder of these sessions is alive (see store.summary)."""
        query = sessions.update().where(sessions.c.id.in_(sorted(session_ids)))
        with self._guard("write heartbeat"), self._writing.begin() as conn:
            conn.execute(query.values(heartbeat_at=time.time()))

    def abandon(self, session_ids: set[str]) -> None:
        """Say that the recorder of these sessions is gone (its spool was replayed by someone
        else): any of them without an end now shows as interrupted."""
        query = sessions.update().where(sessions.c.id.in_(sorted(session_ids)),
                                        sessions.c.ended_at.is_(None))
        with self._guard("mark sessions interrupted"), self._writing.begin() as conn:
            conn.execute(query.values(heartbeat_at=None))

    def ping(self) -> None:
        """StoreUnavailable unless the database answers."""
        with self._guard("reach database"), self._engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    # --- reading ------------------------------------------------------------------------

    def resolve_session(self, ref: str) -> str:
        """The full id for `ref`: a full id, a unique id prefix, or "last" (newest start)."""
        if not ref:
            raise SessionNotFound("no session matches ''")
        with self._guard("find session"), self._engine.connect() as conn:
            if ref == "last":
                found = conn.scalar(summary.newest_first(sa.select(sessions.c.id)).limit(1))
                matches = [found] if found else []
            elif conn.scalar(sa.select(sessions.c.id).where(sessions.c.id == ref)):
                return ref
            else:
                prefixed = sessions.c.id.startswith(ref, autoescape=True)
                like = sa.select(sessions.c.id).where(prefixed)
                # SQLite's LIKE ignores case; ids are compared exactly here.
                matches = [i for i in conn.scalars(like) if i.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise SessionNotFound(f"no session matches {ref!r}")
        raise SessionNotFound(f"{len(matches)} sessions match {ref!r}; give more of the id")

    def get_session(self, session_id: str) -> Session:
        with self._guard("read session"), self._engine.connect() as conn:
            row = conn.execute(_SESSION_ROW, {"id": session_id}).mappings().first()
        if row is None:
            raise SessionNotFound(f"no session matches {session_id!r}")
        return summary.session_of(row)

    def list_sessions(self, limit: int | None = 20) -> list[dict[str, Any]]:
        """Sessions newest first, each as session fields plus summary fields (see
        session_summary). `limit=None` lists them all."""
        page = summary.newest_first(sa.select(sessions.c.id)).limit(limit)
        with self._guard("list sessions"), self._engine.connect() as conn:
            return summary.summaries(conn, page)

    def selection_rows(self, ids: list[str] | None = None, *, since: float | None = None,
                       newest_first: bool = False) -> Iterator[dict[str, Any]]:
        """What session filters look at, oldest first (or newest first) and streamed,
        without summing any exchange: id, harness, user, started_at, tags, and the label's
        tags (None when the session has no label). `ids`: only these sessions (default:
        all); `since`: only those started at or after it."""
        with self._guard("list sessions"), self._engine.connect() as conn:
            yield from summary.selection_rows(conn, ids, since, newest_first)

    def listing(self, since: float | None = None) -> Iterator[dict[str, Any]]:
        """Sessions newest first as `sessions` selects them, each with its kept lineage
        figure, unchecked (store.kept.listing). Streamed."""
        with self._guard("list sessions"), self._engine.connect() as conn:
            yield from kept.listing(conn, since)

    def keep(self, column: str, figures: dict[str, tuple[dict[str, Any], int]]) -> None:
        """Keep figures computed from the sessions' exchanges on their rows (store.kept)."""
        if figures:
            with self.transaction(f"keep {column} of {len(figures)} sessions") as conn:
                kept.keep(conn, column, figures)

    def session_summary(self, session_id: str) -> dict[str, Any]:
        """The session's fields (as Session.to_dict) plus: calls (exchanges of kind "model"),
        side_calls (every other kind, e.g. count_tokens), tool_calls, token sums, model
        (the first model seen) and status ("ended", "recording" or "interrupted", see
        store.summary). Tool calls and tokens count model calls only: a side call's token
        count measures a prompt, it is not spend."""
        ids = sa.select(sessions.c.id).where(sessions.c.id == session_id)
        with self._guard("summarize session"), self._engine.connect() as conn:
            found = summary.summaries(conn, ids)
        if not found:
            raise SessionNotFound(f"no session matches {session_id!r}")
        return found[0]

    def iter_exchanges(self, session_id: str, raw: bool = False) -> Iterator[Exchange]:
        """The session's exchanges in seq order, streamed. Raw bodies are read and
        rebuilt only if `raw`; otherwise they are b"". SessionNotFound at call time."""
        with self._guard("read session"), self._engine.connect() as conn:
            if conn.scalar(_SESSION_ID, {"id": session_id}) is None:
                raise SessionNotFound(f"no session matches {session_id!r}")
        return self._iter_exchanges(session_id, raw)

    def _iter_exchanges(self, session_id: str, raw: bool) -> Iterator[Exchange]:
        with self._guard("read exchanges"), self._engine.connect() as conn:
            yield from reader.read_session(conn, session_id, raw)

    def get_exchange(self, session_id: str, seq: int, raw: bool = False) -> Exchange:
        """One exchange, decoding only what it depends on (random access)."""
        with self._guard("read exchange"), self._engine.connect() as conn:
            found = reader.read_one(conn, session_id, seq, raw)
        if found is None:
            raise StoreError(f"session {session_id} has no exchange {seq}")
        return found

    # --- labels (store.labels) -------------------------------------------------------------

    def label_session(self, session_id: str, *, reward: float | None = None,
                      tags: dict[str, str] | None = None, note: str | None = None) -> None:
        """Merge an outcome into the session's label (see store.labels)."""
        with self.transaction(f"label session {session_id}") as conn:
            labels.merge(conn, session_id, reward=reward, tags=tags, note=note)

    def get_label(self, session_id: str) -> dict[str, Any] | None:
        """The session's label, or None if it has none."""
        with self.reading("read label") as conn:
            return labels.read(conn, session_id)

    def seqs(self, session_id: str) -> set[int]:
        """The seqs of the session's stored exchanges."""
        query = sa.select(exchanges.c.seq).where(exchanges.c.session_id == session_id)
        with self._guard("list exchanges"), self._engine.connect() as conn:
            return set(conn.scalars(query))


def _doing(items: list[Item]) -> str:
    first = describe(items[0])
    return f"add {first}" if len(items) == 1 else f"write {len(items)} items ({first}, ...)"
