"""Rollout sessions of `forge-record serve` (revision 0004): the SQL behind the gateway.

Every replica of a gateway reads and writes these rows, so nothing about a session lives in
one process. Contract:
- `create` adds the `sessions` row and its `gateway_sessions` row in the caller's transaction;
  the token's sha256 is stored, never the token.
- `by_token` finds the session a token belongs to; `next_seq` (store.batch's: a writer uses
  it too) hands out the session's next exchange number (one sequence per session, shared by
  every replica).
- `missing_calls` lists the numbers handed out that no stored exchange has (in-flight or lost
  calls, and spooled ones until their replay).
- `finish` sets a session's end once: the first call gives it the next `finish_seq` (under a
  lock, so finish order is commit order and a cursor never skips a session that commits
  late); a second call changes nothing and says so.
- `finished_after(cursor)` pages finished sessions in finish order.
Sessions are read back as plain dicts (`row_dict`).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import sqlalchemy as sa

from forge_record.records import Session
from forge_record.store.batch import Writes, next_seq  # noqa: F401 - one sequence, for serve
from forge_record.store.items import AddSession
from forge_record.store.schema import exchanges, gateway_sessions

OPEN, DONE, DISCARDED = "open", "done", "discarded"
FINISHED = (DONE, DISCARDED)
_PG_FINISH_LOCK = 0x66726566  # "fref": serializes finishes across replicas on Postgres


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create(conn: sa.Connection, session: Session, token: str, meta: dict[str, Any]) -> None:
    Writes().apply(conn, [AddSession(session, None, None)])
    group = meta.get("group_id")
    conn.execute(gateway_sessions.insert(), {
        "session_id": session.id, "token_hash": token_hash(token), "meta": meta,
        "group_id": None if group is None else str(group), "keyed_by": None, "calls": 0,
        "status": OPEN, "created_at": time.time(),
    })


def get(conn: sa.Connection, session_id: str) -> dict[str, Any] | None:
    row = conn.execute(sa.select(gateway_sessions)
                       .where(gateway_sessions.c.session_id == session_id)).first()
    return None if row is None else row_dict(row)


def by_token(conn: sa.Connection, token: str) -> dict[str, Any] | None:
    row = conn.execute(sa.select(gateway_sessions)
                       .where(gateway_sessions.c.token_hash == token_hash(token))).first()
    return None if row is None else row_dict(row)


def missing_calls(conn: sa.Connection, session_id: str) -> list[int]:
    """The numbers handed out in the session's sequence that no stored exchange has, in
    order. A number is handed out as its call starts (recorder/gateway/reservations.py), so
    these are calls still in flight, calls a killed replica was carrying (lost: their gap
    stays), and exchanges waiting in a writer's spool (their replay fills the gap, under the
    same number). Read each time, since the last kind fills in later."""
    calls = conn.scalar(sa.select(gateway_sessions.c.calls)
                        .where(gateway_sessions.c.session_id == session_id)) or 0
    if not calls:
        return []
    stored = set(conn.scalars(sa.select(exchanges.c.seq).where(
        exchanges.c.session_id == session_id, exchanges.c.seq <= calls)))
    return [n for n in range(1, calls + 1) if n not in stored]


def finish(conn: sa.Connection, session_id: str, status: str,
           exit_code: int | None) -> tuple[bool, dict[str, Any] | None]:
    """(whether this call finished it, the row after). None for an unknown session."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_FINISH_LOCK})
    row = get(conn, session_id)
    if row is None or row["status"] in FINISHED:
        return False, row
    last = conn.scalar(sa.select(sa.func.max(gateway_sessions.c.finish_seq)))
    values = {"status": status, "exit_code": exit_code, "finished_at": time.time(),
              "finish_seq": (last or 0) + 1}
    conn.execute(gateway_sessions.update()
                 .where(gateway_sessions.c.session_id == session_id).values(**values))
    return True, {**row, **values}


def finished_after(conn: sa.Connection, cursor: int, limit: int,
                   group_id: str | None = None) -> list[dict[str, Any]]:
    query = (sa.select(gateway_sessions).where(gateway_sessions.c.finish_seq > cursor)
             .order_by(gateway_sessions.c.finish_seq).limit(limit))
    if group_id is not None:
        query = query.where(gateway_sessions.c.group_id == group_id)
    return [row_dict(r) for r in conn.execute(query)]


def row_dict(row: Any) -> dict[str, Any]:
    out = dict(row._mapping)
    out.pop("token_hash", None)  # nobody outside this module needs it
    out["meta"] = dict(out["meta"] or {})
    return out
