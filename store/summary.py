"""Session rows as records, summaries with sums over their exchanges, and session status.

A session's status is derived, never stored, so nothing has to run when a recorder dies:
- "ended": its recorder wrote the end (ended_at is set);
- "recording": no end yet, and its recorder said it was alive (heartbeat_at, written with
  every batch and every HEARTBEAT_EVERY seconds while idle) less than STALE_AFTER ago, and if
  it ran on this host, its process still exists;
- "interrupted": no end, and the recorder is gone: killed, crashed, or the machine went down.
  Its exchanges written (or spooled and replayed) so far are all there.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import sqlalchemy as sa

from forge_record.records import Session, session_from_dict, session_to_dict
from forge_record.store.batch import TOKEN_COLUMNS
from forge_record.store.schema import exchanges, labels, sessions

HEARTBEAT_EVERY = 60.0
STALE_AFTER = 3 * HEARTBEAT_EVERY
AGGREGATES = ("calls", "side_calls", "tool_calls", *TOKEN_COLUMNS)
_SESSION_FIELDS = [f.name for f in fields(Session)]


def newest_first(query: sa.Select) -> sa.Select:
    return query.order_by(sessions.c.started_at.desc(), sessions.c.id.desc())


def session_of(row: Any) -> Session:
    data = {f: row[f] for f in _SESSION_FIELDS if f != "user"}
    return session_from_dict({**data, "user": row["user_name"]})


def status(row: Any, now: float | None = None) -> str:
    if row["ended_at"] is not None:
        return "ended"
    beat = row["heartbeat_at"]
    if beat is None or (now or time.time()) - beat > STALE_AFTER:
        return "interrupted"
    pid = row["recorder_pid"]
    if pid and row["host"] == socket.gethostname() and not _alive(pid):
        return "interrupted"
    return "recording"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def summaries(conn: sa.Connection, ids: sa.Select) -> list[dict[str, Any]]:
    """Summary dicts for the sessions whose ids `ids` selects, newest first."""
    e = exchanges.c
    is_model = e.kind == "model"
    model_sums = [sa.func.sum(sa.case((is_model, e[c]))).label(c) for c in TOKEN_COLUMNS]
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
    query = newest_first(
        sa.select(
            sessions,
            *[sa.func.coalesce(totals.c[a], 0).label(a) for a in AGGREGATES],
            first_model.label("model"),
        )
        .select_from(sessions.outerjoin(totals, totals.c.session_id == sessions.c.id))
        .where(sessions.c.id.in_(ids.scalar_subquery()))
    )
    out = []
    now = time.time()
    for row in conn.execute(query).mappings():
        summary = session_to_dict(session_of(row))
        summary.update({a: row[a] for a in AGGREGATES}, model=row["model"],
                       status=status(row, now))
        out.append(summary)
    return out


_SELECTION = (
    sa.select(sessions.c.id, sessions.c.harness, sessions.c.user_name, sessions.c.started_at,
              sessions.c.tags, labels.c.session_id.label("labelled"),
              labels.c.tags.label("label_tags"))
    .select_from(sessions.outerjoin(labels, labels.c.session_id == sessions.c.id))
)


def selection_rows(conn: sa.Connection, ids: list[str] | None, since: float | None,
                   newest: bool) -> Iterator[dict[str, Any]]:
    """See Store.selection_rows. Streamed: a store of many sessions is never held."""
    query = _SELECTION if ids is None else _SELECTION.where(sessions.c.id.in_(ids))
    if since is not None:
        query = query.where(sessions.c.started_at >= since)
    query = newest_first(query) if newest else query.order_by(sessions.c.started_at,
                                                              sessions.c.id)
    for row in conn.execute(query.execution_options(yield_per=500)):
        yield {"id": row.id, "harness": row.harness, "user": row.user_name,
               "started_at": row.started_at, "tags": row.tags or {},
               "label_tags": None if row.labelled is None else dict(row.label_tags or {})}
