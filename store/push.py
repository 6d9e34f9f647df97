"""Copy sessions from one store to another (`forge-record push`): idempotent and resumable.

For each session, oldest first: the session row is added to the target if it is missing, or
brought up to date (end, exit code, harness version, heartbeat) if the source knows more.
Then the exchanges the target lacks are copied in batches of BATCH, one transaction each, in
the order their streams need (segment, then piece). Rows are copied as stored: manifests,
deltas and summary columns, byte for byte. The blobs they name that the target does not have
are read from the source and packed anew in the target (the target's own pack groups). So:
- running push again copies nothing that is already there (exchanges are keyed by session
  and seq, blobs by hash);
- a push that stops midway (a crash, Ctrl-C, a network cut) leaves whole batches behind,
  each a prefix of its segment's stream, and the next push goes on from there;
- each batch extends the target session's kept pack groups (store.kept) with the target's
  groups of the blobs its manifests name, so the target's gc need not decode what was pushed.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from forge_record.errors import UsageError
from forge_record.store import compression, content, kept
from forge_record.store.batch import (
    dialect_insert,
    groups_of,
    hold_off_repacks,
    insert_pack,
    keep_groups,
    touch,
)
from forge_record.store.reader import BlobReader, chunks, segment_manifests
from forge_record.store.schema import LAYOUT_RECORD, exchanges, sessions
from forge_record.store.segments import spans
from forge_record.store.store import Store

BATCH = 50
_COPIED = [c.name for c in exchanges.columns if c.name != "id"]
_UPDATABLE = ("ended_at", "exit_code", "harness_version", "heartbeat_at", "recorder_pid")


@dataclass
class Report:
    sessions: int = 0  # sessions the target lacked or had fewer exchanges of
    exchanges: int = 0
    blobs: int = 0
    new_sessions: int = 0  # sessions the target did not have at all (some have no exchanges)
    completed: int = 0  # sessions the target had in part (a push that was interrupted)


def plan(source: Store, target: Store, session_ids: list[str]) -> dict[str, list[int]]:
    """session id -> the seqs the target lacks (sessions with nothing to copy included, so
    that their rows are brought up to date)."""
    if source.fingerprint == target.fingerprint:
        raise UsageError("push needs two different stores (--store is the source, --to the target)")
    out = {}
    for sid in session_ids:
        have = target.seqs(sid) if _exists(target, sid) else set()
        out[sid] = sorted(source.seqs(sid) - have)
    return out


def push(source: Store, target: Store, todo: dict[str, list[int]],
         progress: Callable[[int], None] = lambda n: None) -> Report:
    report = Report()
    for sid, seqs in todo.items():
        added = _copy_session_row(source, target, sid)
        report.new_sessions += added
        if seqs:
            report.sessions += 1
            report.completed += not added
        for batch in _batches(source, sid, set(seqs)):
            report.blobs += _copy_batch(source, target, sid, batch)
            report.exchanges += len(batch)
            progress(len(batch))
    return report


def _exists(store: Store, session_id: str) -> bool:
    with store.reading("find session") as conn:
        return conn.scalar(sa.select(sessions.c.id).where(sessions.c.id == session_id)) is not None


def _copy_session_row(source: Store, target: Store, session_id: str) -> bool:
    """Add the session row, or bring it up to date; True if the target did not have it."""
    with source.reading("read session") as conn:
        row = dict(conn.execute(sa.select(sessions).where(sessions.c.id == session_id))
                   .mappings().one())
    # The source's pack groups are not the target's: the target's are kept as the exchanges
    # are copied in (store.batch.keep_groups).
    row[kept.PACK_GROUPS] = None
    with target.transaction(f"push session {session_id}") as conn:
        insert = dialect_insert(conn, sessions).on_conflict_do_nothing(index_elements=["id"])
        # RETURNING, not rowcount: psycopg reports -1 for this insert
        added = conn.execute(insert.returning(sessions.c.id), row).first() is not None
        known = {k: v for k, v in row.items() if k in _UPDATABLE and v is not None}
        if row["ended_at"] is not None:
            conn.execute(sessions.update().where(sessions.c.id == session_id,
                                                 sessions.c.ended_at.is_(None)).values(**known))
    return added


def _batches(source: Store, session_id: str, wanted: set[int]):
    """Rows to copy in stream order: layout-1 rows, then each segment's pieces in order."""
    with source.reading("read exchanges") as conn:
        query = sa.select(exchanges.c.seq, exchanges.c.layout, exchanges.c.segment,
                          exchanges.c.piece).where(exchanges.c.session_id == session_id)
        rows = sorted((r for r in conn.execute(query) if r.seq in wanted),
                      key=lambda r: (r.layout != LAYOUT_RECORD, r.segment or 0, r.piece or 0))
    yield from chunks(rows, BATCH)


def _copy_batch(source: Store, target: Store, session_id: str, batch: list) -> int:
    with source.reading("read exchanges") as conn:
        names: set[str] = set()
        for segment in {r.segment for r in batch if r.layout != LAYOUT_RECORD}:
            found = segment_manifests(conn, session_id, segment)
            for r in batch:
                if r.segment == segment and r.layout != LAYOUT_RECORD:
                    names.update(content.referenced(found[r.seq]))
        rows = [dict(r) for r in conn.execute(
            sa.select(*[exchanges.c[c] for c in _COPIED]).where(
                exchanges.c.session_id == session_id,
                exchanges.c.seq.in_([r.seq for r in batch]))).mappings()]
        order = {r.seq: n for n, r in enumerate(batch)}
        rows.sort(key=lambda r: order[r["seq"]])
        now = time.time()
        with target.transaction(f"push exchanges of {session_id}") as out:
            hold_off_repacks(out)
            missing = sorted(names - touch(out, sorted(names), now))
            if missing:
                reader = BlobReader(conn)
                reader.load(missing)
                datas = [reader.get(n) for n in missing]
                piece = compression.Stream().piece(b"".join(datas))
                insert_pack(out, secrets.randbits(62), piece, missing, datas, spans(datas), now)
            out.execute(exchanges.insert(), rows)
            # The target's pack groups of what these manifests name (store.batch.keep_groups)
            groups = set(groups_of(out, sorted(names)).values())
            keep_groups(out, {session_id: (groups, len(rows))})
    return len(missing)
