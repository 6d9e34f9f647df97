"""Figures kept on a session's row so that readers need not read the session back.

A kept figure is a JSON object on a column of `sessions` (revision 0006): what was computed
from the session's exchanges, plus "exchanges", how many exchanges it was computed from.
A session's exchanges only ever grow (seq is unique, nothing deletes one but its session), so
a figure counts exactly while the session still holds that many; otherwise it is stale and
the reader computes it again (a spool replayed after the figure was kept, a push into the
session). Rows written before 0006 have none. Columns:
- `lineage`: {"usage": lineage.usage, "fingerprints": the conversation calls' fingerprints},
  kept by `sessions` when it first lists or filters a session (commands/sessions.py);
- `pack_groups`: {"groups": [pack group ids its manifests name blobs in]}, kept by the
  writer in the transaction that inserts the exchanges (store.batch.keep_groups: extended
  under the session row's lock while it was valid, or started with the session's first
  exchanges; push likewise; a writer's figure also has a "mark", new each time, by which
  the writer knows its own next time), and by gc for a session whose figure is stale (rows
  written before this, a session written meanwhile by something that does not keep it); gc
  forgets it for the sessions that name a group it drops or repacks.

Keeping is a cache write: a reader keeps what it computed only for sessions no recorder is
writing (status not "recording"), and a failed keep is not the reader's failure. The writer's
`pack_groups` is no cache write: it fails with the batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from forge_record.store.schema import exchanges, labels, sessions

LINEAGE = "lineage"
PACK_GROUPS = "pack_groups"

# How many exchanges a session holds: the unique (session_id, seq) index answers it.
_COUNT = (sa.select(sa.func.count()).select_from(exchanges)
          .where(exchanges.c.session_id == sessions.c.id).scalar_subquery())


def valid(figure: dict[str, Any] | None, held: int) -> dict[str, Any] | None:
    """The figure if it was computed from `held` exchanges (all the session has), else None."""
    if isinstance(figure, dict) and figure.get("exchanges") == held:
        return figure
    return None


def keep(conn: sa.Connection, column: str, figures: dict[str, tuple[dict[str, Any], int]]
         ) -> None:
    """Keep {session id: (figure, exchanges it covers)} in `column`."""
    update = (sessions.update().where(sessions.c.id == sa.bindparam("sid"))
              .values({column: sa.bindparam("figure")}))
    conn.execute(update, [{"sid": sid, "figure": {**figure, "exchanges": n}}
                          for sid, (figure, n) in figures.items()])


def listing(conn: sa.Connection, since: float | None) -> Iterator[dict[str, Any]]:
    """Sessions newest first, streamed, as `sessions` selects them: id, harness,
    harness_version, started_at, ended_at, recorder_pid, heartbeat_at, host (for status),
    tags, label_tags (None without a label), and `lineage`, the kept figure, not yet checked
    (valid() it with the session's count of exchanges: counting here would count every
    session's before the sort)."""
    s = sessions.c
    query = (sa.select(s.id, s.harness, s.harness_version, s.started_at, s.ended_at,
                       s.recorder_pid, s.heartbeat_at, s.host, s.tags, s.lineage,
                       labels.c.session_id.label("labelled"),
                       labels.c.tags.label("label_tags"))
             .select_from(sessions.outerjoin(labels, labels.c.session_id == s.id))
             .order_by(s.started_at.desc(), s.id.desc()))
    if since is not None:
        query = query.where(s.started_at >= since)
    for row in conn.execute(query.execution_options(yield_per=100)).mappings():
        out = dict(row)
        out["tags"] = out["tags"] or {}
        out["label_tags"] = None if row["labelled"] is None else dict(row["label_tags"] or {})
        yield out


def figures(conn: sa.Connection, column: str, ids: list[str] | None = None
            ) -> Iterator[dict[str, Any]]:
    """Every session (or those of `ids`), streamed: id, "figure" (its kept `column` if still
    valid, else None), "held" (its exchanges) and what store.summary.status reads."""
    s = sessions.c
    query = sa.select(s.id, s[column].label("figure"), _COUNT.label("held"), s.ended_at,
                      s.recorder_pid, s.heartbeat_at, s.host)
    if ids is not None:
        query = query.where(s.id.in_(ids))
    for row in conn.execute(query.execution_options(yield_per=500)).mappings():
        yield {**row, "figure": valid(row["figure"], row["held"])}
