"""Store: sessions and exchanges in SQLite or Postgres. The only module that runs SQL on them.

Contract:
- open_store(url) returns a Store whose schema is at migrate.head(), or raises StoreError with
  a one-line message. SQLite stores migrate themselves on open (a file store has one user, who
  just upgraded forge-record). A Postgres store may be shared by several machines and
  versions, so it is upgraded only on purpose (`forge-record db upgrade`, i.e. upgrade_store)
  -- except a database with no tables at all, which is set up on first use because there is
  nothing an upgrade could break.
- Every write is one transaction, committed before the method returns.
- Secret headers (SECRET_HEADERS) never reach the database, even if a caller forgot to drop
  them.
- Read errors and write errors surface as StoreError (SessionNotFound for a missing session).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from forge_record.errors import SessionNotFound, StoreError
from forge_record.records import (
    RECORD_VERSION,
    Exchange,
    Response,
    Session,
    ToolCall,
    exchange_from_dict,
    exchange_to_dict,
    session_from_dict,
    session_to_dict,
)
from forge_record.redact import SECRET_HEADERS, redact_url
from forge_record.store import codec, migrate
from forge_record.store.engine import make_engine, show_url, writing
from forge_record.store.schema import exchanges, sessions

_TOKEN_COLUMNS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
AGGREGATES = ("calls", "side_calls", "tool_calls", *_TOKEN_COLUMNS)


def open_store(url: str) -> Store:
    """Open (and for SQLite or an empty Postgres database, migrate) the store at `url`."""
    engine = make_engine(url)
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


@contextlib.contextmanager
def _opening(engine: sa.Engine) -> Iterator[None]:
    try:
        yield
    except StoreError:
        engine.dispose()
        raise
    except SQLAlchemyError as e:
        engine.dispose()
        raise StoreError(f"cannot open store {show_url(engine.url)}: {_reason(e)}") from e


def _reason(e: SQLAlchemyError) -> str:
    """The driver's message on one line, without SQLAlchemy's SQL echo and help link."""
    text = " ".join(str(getattr(e, "orig", None) or e).split())
    return re.sub(r"\s*\(Background on this error at: \S+\)", "", text)


class Store:
    """Reads and writes records. Thread-safe; see forge_record.store.Writer for the proxy path."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._writing = writing(engine)
        self.url = engine.url.render_as_string(hide_password=True)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._engine.dispose()

    @contextlib.contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except SQLAlchemyError as e:
            raise StoreError(f"cannot {doing} in store {self.url}: {_reason(e)}") from e

    def add_session(self, session: Session) -> None:
        row = session_to_dict(session)
        row["user_name"] = row.pop("user")
        row["record_version"] = RECORD_VERSION
        with self._guard(f"add session {session.id}"), self._writing.begin() as conn:
            conn.execute(sessions.insert(), row)

    def end_session(
        self,
        session_id: str,
        ended_at: float,
        exit_code: int | None,
        *,
        harness_version: str | None = None,
    ) -> None:
        """Record how the session ended, and the harness version if it was learned only
        while recording (None leaves it as it was). SessionNotFound if never added."""
        values = {"ended_at": ended_at, "exit_code": exit_code}
        if harness_version:
            values["harness_version"] = harness_version
        query = sessions.update().where(sessions.c.id == session_id).values(**values)
        with self._guard(f"end session {session_id}"), self._writing.begin() as conn:
            if conn.execute(query).rowcount == 0:
                raise SessionNotFound(f"no session matches {session_id!r}")

    def add_exchange(self, session_id: str, exchange: Exchange) -> None:
        """Write one exchange; on return it is committed. Its session must exist."""
        row = _exchange_row(session_id, exchange)
        doing = f"add exchange {exchange.seq} of session {session_id}"
        with self._guard(doing), self._writing.begin() as conn:
            conn.execute(exchanges.insert(), row)

    def resolve_session(self, ref: str) -> str:
        """The full id for `ref`: a full id, a unique id prefix, or "last" (newest start)."""
        if not ref:
            raise SessionNotFound("no session matches ''")
        with self._guard("find session"), self._engine.connect() as conn:
            if ref == "last":
                found = conn.scalar(_newest_first(sa.select(sessions.c.id)).limit(1))
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
        query = sa.select(sessions).where(sessions.c.id == session_id)
        with self._guard("read session"), self._engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        if row is None:
            raise SessionNotFound(f"no session matches {session_id!r}")
        return _session(row)

    def list_sessions(self, limit: int | None = 20) -> list[dict[str, Any]]:
        """Sessions newest first, each as session fields plus summary fields (see
        session_summary). `limit=None` lists them all."""
        page = _newest_first(sa.select(sessions.c.id)).limit(limit)
        with self._guard("list sessions"), self._engine.connect() as conn:
            return _summaries(conn, page)

    def session_summary(self, session_id: str) -> dict[str, Any]:
        """The session's fields (as Session.to_dict) plus: calls (exchanges of kind "model"),
        side_calls (every other kind, e.g. count_tokens), tool_calls, token sums, and model
        (the first model seen). Tool calls and tokens count model calls only: a side call's
        token count measures a prompt, it is not spend."""
        ids = sa.select(sessions.c.id).where(sessions.c.id == session_id)
        with self._guard("summarize session"), self._engine.connect() as conn:
            found = _summaries(conn, ids)
        if not found:
            raise SessionNotFound(f"no session matches {session_id!r}")
        return found[0]

    def iter_exchanges(self, session_id: str, raw: bool = False) -> Iterator[Exchange]:
        """The session's exchanges in seq order, streamed. Raw bodies are read and
        decompressed only if `raw`; otherwise they are b"". SessionNotFound at call time."""
        self.get_session(session_id)
        return self._iter_exchanges(session_id, raw)

    def _iter_exchanges(self, session_id: str, raw: bool) -> Iterator[Exchange]:
        columns = [exchanges.c.record]
        if raw:
            columns += [exchanges.c.raw_request, exchanges.c.raw_response]
        query = sa.select(*columns).where(exchanges.c.session_id == session_id)
        query = query.order_by(exchanges.c.seq).execution_options(yield_per=64)
        with self._guard("read exchanges"), self._engine.connect() as conn:
            for row in conn.execute(query):
                bodies = (codec.decompress(row[1]), codec.decompress(row[2])) if raw else ()
                yield exchange_from_dict(codec.unpack(row[0]), *bodies)


def _newest_first(query: sa.Select) -> sa.Select:
    return query.order_by(sessions.c.started_at.desc(), sessions.c.id.desc())


def _session(row: Any) -> Session:
    data = {c: row[c] for c in row.keys() if c not in ("user_name", "record_version")}
    return session_from_dict({**data, "user": row["user_name"]})


def _summaries(conn: sa.Connection, ids: sa.Select) -> list[dict[str, Any]]:
    """Summary dicts for the sessions whose ids `ids` selects, newest first."""
    e = exchanges.c
    is_model = e.kind == "model"
    model_sums = [sa.func.sum(sa.case((is_model, e[c]))).label(c) for c in _TOKEN_COLUMNS]
    totals = (
        sa.select(
            e.session_id,
            sa.func.count(sa.case((is_model, 1))).label("calls"),
            sa.func.count(sa.case((~is_model, 1))).label("side_calls"),
            sa.func.sum(sa.case((is_model, e.tool_calls))).label("tool_calls"),
            *model_sums,
        )
        .where(e.session_id.in_(ids.scalar_subquery()))
        .group_by(e.session_id)
        .subquery()
    )
    first_model = (
        sa.select(e.model)
        .where(e.session_id == sessions.c.id, e.model.is_not(None))
        .order_by(e.seq)
        .limit(1)
        .scalar_subquery()
    )
    query = _newest_first(
        sa.select(
            sessions,
            *[sa.func.coalesce(totals.c[a], 0).label(a) for a in AGGREGATES],
            first_model.label("model"),
        )
        .select_from(sessions.outerjoin(totals, totals.c.session_id == sessions.c.id))
        .where(sessions.c.id.in_(ids.scalar_subquery()))
    )
    out = []
    for row in conn.execute(query).mappings():
        summary = session_to_dict(_session({k: row[k] for k in sessions.c.keys()}))
        summary.update({a: row[a] for a in AGGREGATES}, model=row["model"])
        out.append(summary)
    return out


def _exchange_row(session_id: str, exchange: Exchange) -> dict[str, Any]:
    ex = dataclasses.replace(
        exchange,
        url=redact_url(exchange.url),
        request_headers=_without_secrets(exchange.request_headers),
        response_headers=_without_secrets(exchange.response_headers),
    )
    response = ex.response or Response()
    usage = response.usage
    return {
        "session_id": session_id,
        **{k: getattr(ex, k) for k in ("seq", "dialect", "kind", "method", "url", "status")},
        **{k: getattr(ex, k) for k in ("http_status", "started_at", "first_byte_at", "ended_at")},
        # What the agent asked for names the call even when no response came back.
        "model": (ex.request.model if ex.request else None) or response.model,
        **{c: getattr(usage, c) for c in _TOKEN_COLUMNS},
        "tool_calls": sum(isinstance(b, ToolCall) for b in response.content),
        "flags": list(ex.flags),
        "record": codec.pack(exchange_to_dict(ex)),
        "raw_request": codec.compress(ex.raw_request),
        "raw_response": codec.compress(ex.raw_response),
    }


def _without_secrets(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in SECRET_HEADERS}
