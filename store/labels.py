"""Session labels (revision 0003): the SQL behind Store.label_session and Store.get_label.

One row per session. Labelling merges into it: a reward or note that is given replaces the
stored one, given tags are added to the stored tags (a key given again takes the new value),
and whatever is not given stays. A label reads back as
`{"reward", "tags", "note", "created_at", "updated_at"}`.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from forge_record.errors import SessionNotFound
from forge_record.store.schema import labels, sessions


def merge(conn: sa.Connection, session_id: str, *, reward: float | None,
          tags: dict[str, str] | None, note: str | None) -> None:
    if conn.scalar(sa.select(sessions.c.id).where(sessions.c.id == session_id)) is None:
        raise SessionNotFound(f"no session matches {session_id!r}")
    now = time.time()
    old = read(conn, session_id)
    if old is None:
        conn.execute(labels.insert(), {"session_id": session_id, "reward": reward,
                                       "note": note, "tags": dict(tags or {}),
                                       "created_at": now, "updated_at": now})
        return
    values: dict[str, Any] = {"updated_at": now, "tags": {**old["tags"], **(tags or {})}}
    if reward is not None:
        values["reward"] = reward
    if note is not None:
        values["note"] = note
    conn.execute(labels.update().where(labels.c.session_id == session_id).values(**values))


def read(conn: sa.Connection, session_id: str) -> dict[str, Any] | None:
    row = conn.execute(sa.select(labels).where(labels.c.session_id == session_id)).first()
    if row is None:
        return None
    return {"reward": row.reward, "tags": dict(row.tags or {}), "note": row.note,
            "created_at": row.created_at, "updated_at": row.updated_at}
