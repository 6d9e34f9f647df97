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
- a sealed segment (store.sealed: its first row holds what every row held) is copied whole,
  in one batch, in place of the rows of it the target has: a prefix copied before the
  source sealed it, whose stream the sealed rows no longer go on.
- each batch extends the target session's kept pack groups (store.kept) with the target's
  groups of the blobs its manifests name, so the target's gc need not decode what was pushed.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from forge_record.errors import UsageError
from forge_record.store import compression, content, kept, sealed
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
        wanted = set(seqs)
        for batch in _batches(source, sid, wanted):
            report.blobs += _copy_batch(source, target, sid, batch)
            new = sum(r.seq in wanted for r in batch)
            report.exchanges += new
            progress(new)
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


_ROWS = sa.select(exchanges.c.seq, exchanges.c.layout, exchanges.c.segment, exchanges.c.piece,
                  sa.func.substr(exchanges.c.record, 1, 1).label("mark")).where(
    exchanges.c.session_id == sa.bindparam("session_id"))


def _batches(source: Store, session_id: str, wanted: set[int]):
    """Rows to copy in stream order: layout-1 rows, then each segment's pieces in order; a
    sealed segment with any row wanted is one batch of all its rows."""
    with source.reading("read exchanges") as conn:
        rows = sorted(conn.execute(_ROWS, {"session_id": session_id}),
                      key=lambda r: (r.layout != LAYOUT_RECORD, r.segment or 0, r.piece or 0))
    whole = {r.segment for r in rows if r.piece == 0 and sealed.is_sealed(bytes(r.mark or b""))}
    pieces = []  # rows wanted, in order, until a sealed segment's batch
    for segment, found in itertools.groupby(rows, key=lambda r: r.segment):
        found = list(found)
        if segment not in whole:
            pieces += [r for r in found if r.seq in wanted]
        elif any(r.seq in wanted for r in found):
            yield from chunks(pieces, BATCH)
            pieces = []
            yield found
    yield from chunks(pieces, BATCH)


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
            # A sealed segment's rows the target has (copied before the seal) make way.
            replaced = out.execute(exchanges.delete().where(
                exchanges.c.session_id == session_id,
                exchanges.c.seq.in_([r["seq"] for r in rows]))).rowcount
            out.execute(exchanges.insert(), rows)
            # The target's pack groups of what these manifests name (store.batch.keep_groups)
            groups = set(groups_of(out, sorted(names)).values())
            keep_groups(out, {session_id: (groups, len(rows) - replaced)})
    return len(missing)
