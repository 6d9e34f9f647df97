"""Sealing a finished pack group: its pieces become one frame, in one pack row.

A pack stream is written a piece a call, each flushed so that the call is stored on its own
(store.segments). The flushes and the rows cost: a real 150-call Claude Code session's group
takes 150.8 KB in pieces at level 9, and a row per piece on Postgres (~25 KB more), where the
same plain bytes as one frame at compression.SEAL_LEVEL take 140.9 KB. So once no writer
will add to a group (its session ended, its segment is full, its writer let the session's
encoder go, it idled past segments.PACK_IDLE, or the writer's Store closes), the writer that
wrote it seals it, in a transaction of its own after the batch that finished it committed:
one new pack holding the same plain bytes in the same order, from the same dictionary, under
the same group id; the blob rows it made there point into it; the old packs go. The stream
resumed segments share (store.batch) is sealed when it fills, its encoders going on in the
next one, and as its writer closes.

What stays true, so nothing else has to know:
- the group and its plain bytes: a dictionary made of its first bytes, the pack groups a
  session's figure keeps (store.kept) and what a writer found with groups_of stay right;
- every blob reads back: the frame is decoded and compared before anything moves, and a
  reader that finds a blob's old pack gone looks the blob up again (reader.BlobReader);
- gc: the new pack is as old as the newest it replaces, and seals hold off gc's repacks
  (store.batch.REPACK_LOCK) as writers do.
A group is left as it is when it has one pack, when its packs do not add up to what the
writer fed it (a batch that failed: Writes.forget drops those, this is the check), when
one frame would not be smaller, and when a blob row it made is not where it was written
(the seal raises, and its transaction rolls back). On SQLite the pages freed go back to the
file system (auto_vacuum = INCREMENTAL, store.engine): otherwise a file would keep them until
the next session's writes reuse them.
"""

from __future__ import annotations

import bisect
import itertools

import sqlalchemy as sa

from forge_record.errors import StoreError
from forge_record.identity import blob_key
from forge_record.store import compression, content, sealed
from forge_record.store.batch import hold_off_repacks, new_pack
from forge_record.store.engine import give_back_pages
from forge_record.store.reader import SessionReader, chunks
from forge_record.store.schema import blobs, exchanges, packs
from forge_record.store.segments import FinishedSegment, Written

_GROUP = sa.select(packs.c.id, packs.c.data, packs.c.size, packs.c.created_at,
                   packs.c.dictionary_id).where(
    packs.c.group_id == sa.bindparam("group")).order_by(packs.c.id)
_MOVE = blobs.update().where(blobs.c.hash == sa.bindparam("name"),
                             blobs.c.pack_id == sa.bindparam("old")).values(
    pack_id=sa.bindparam("new"), start=sa.bindparam("at"))
# Postgres: one statement from three arrays, as store.batch inserts blob rows (a row a round
# trip cost the writer ~0.1 ms a call on the real 1,000-call session), the rows locked first
# in name order.
_MOVE_PG = sa.text("""
WITH moving AS (
    SELECT b.hash, m.start FROM blobs b
    JOIN unnest(CAST(:keys AS bytea[]), CAST(:olds AS integer[]), CAST(:starts AS integer[]))
        AS m(hash, old, start) ON b.hash = m.hash AND b.pack_id = m.old
    ORDER BY b.hash FOR UPDATE OF b)
UPDATE blobs SET pack_id = :new, start = moving.start FROM moving
WHERE blobs.hash = moving.hash""")
# (Bound as `sid` and `number`: an UPDATE reserves its columns' names for their new values.)
_IN_SEGMENT = (exchanges.c.session_id == sa.bindparam("sid"),
               exchanges.c.segment == sa.bindparam("number"))
_SEGMENT = sa.select(exchanges).where(*_IN_SEGMENT).order_by(exchanges.c.piece)
_DELETE_SEGMENT = exchanges.delete().where(*_IN_SEGMENT)
_EMPTY_REST = exchanges.update().where(*_IN_SEGMENT, exchanges.c.piece > 0).values(
    record=b"", raw_response=b"")
_FIRST = exchanges.update().where(*_IN_SEGMENT, exchanges.c.piece == 0).values(
    record=sa.bindparam("sealed_record"), raw_response=sa.bindparam("sealed_response"))


def seal(conn: sa.Connection, written: Written) -> int:
    """Seal the group `written` describes, inside the caller's transaction; returns the
    stored bytes it saved (0: left as it was)."""
    hold_off_repacks(conn)
    rows = conn.execute(_GROUP, {"group": written.group}).all()
    if len(rows) < 2 or sum(r.size for r in rows) != written.fed:
        return 0
    prefix = written.dictionary[1] if written.dictionary else b""
    plain = b"".join(compression.decode_pieces((r.data for r in rows), prefix))
    frame = compression.seal(plain, prefix)
    stored = sum(len(r.data) for r in rows)
    if len(frame) >= stored or compression.decode_pieces([frame], prefix) != [plain]:
        return 0
    new = new_pack(conn, written.group, frame, len(plain), max(r.created_at for r in rows),
                   rows[0].dictionary_id)
    starts = list(itertools.accumulate((r.size for r in rows), initial=0))
    # Each blob's old pack is the one its offset falls in: the row that must still be there.
    # Locked in name order, as writers lock blob rows (store.batch.touch), so that a writer
    # reusing some of these blobs meanwhile never deadlocks with the seal.
    moves = [(name, rows[bisect.bisect_right(starts, at) - 1].id, at)
             for name, at in sorted(written.made)]
    if moves and conn.dialect.name == "postgresql":
        moved = conn.execute(_MOVE_PG, {
            "new": new, "keys": [blob_key(n) for n, _, _ in moves],
            "olds": [old for _, old, _ in moves], "starts": [at for _, _, at in moves]}).rowcount
    elif moves:
        moved = conn.execute(_MOVE, [{"name": name, "old": old, "new": new, "at": at}
                                     for name, old, at in moves]).rowcount
    if moves and moved != len(moves):  # a row not where it was written: leave the group be
        raise StoreError(f"{len(moves) - moved} blob rows of pack group {written.group} moved "
                         "since they were written")
    for part in chunks([r.id for r in rows]):
        conn.execute(packs.delete().where(packs.c.id.in_(part)))
    give_back_pages(conn)
    return stored - len(frame)


def seal_segment(conn: sa.Connection, finished: FinishedSegment) -> int:
    """Seal a finished segment's manifests and raw responses into its first row
    (store.sealed), inside the caller's transaction; returns the stored bytes it saved (0:
    left as it was)."""
    at = {"sid": finished.session_id, "number": finished.segment}
    rows = conn.execute(_SEGMENT, at).all()
    if (len(rows) < 2 or len(rows) != finished.pieces or sealed.is_sealed(rows[0].record)
            or [r.piece for r in rows] != list(range(len(rows)))):
        return 0
    reader = SessionReader(conn, finished.session_id)
    reader.add_segment(finished.segment, preload=False)
    # A resumed segment goes on from its session's tail: each of its chains (the main loop's,
    # a sub-agent's) may go on from a parent in an earlier segment, not only its first row's.
    for r in rows:
        parent = content.parent(reader.manifests[r.seq])
        if parent is not None and parent not in reader.manifests:
            reader.add_parents(r.seq)
    reader.blobs.load(n for r in rows if (n := reader.answer_name(r.seq)))
    manifests = [reader.pieces[r.seq] for r in rows]
    answers = [reader.answer(r.seq) for r in rows]
    # As the frames cut them: cutting the bodies again would cost a regex over each.
    cuts = [reader.response_cut(r.seq, r.raw_response) for r in rows]
    record = sealed.seal_manifests(manifests)
    response = sealed.seal_responses(cuts, manifests, answers)
    stored = sum(len(r.record) + len(r.raw_response) for r in rows)
    if (len(record) + len(response) >= stored
            or sealed.unseal_manifests(record) != manifests
            or sealed.unseal_cuts(response, manifests, answers) != cuts):
        return 0
    if conn.dialect.name == "sqlite":
        changed = _rewrite(conn, at, rows, record, response)
    else:
        changed = (conn.execute(_EMPTY_REST, at).rowcount + conn.execute(_FIRST, {
            **at, "sealed_record": record, "sealed_response": response}).rowcount)
    if changed != len(rows):
        raise StoreError(f"session {finished.session_id} segment {finished.segment} changed "
                         "while it was sealed")
    give_back_pages(conn)
    return stored - len(record) - len(response)


def _rewrite(conn: sa.Connection, at: dict, rows: list, record: bytes, response: bytes) -> int:
    """SQLite: the segment's rows written again, with the same ids, sealed. Rows that shrink
    in place leave their pages a third full (the generated session's file grew by 8 KB so);
    written anew they fill the pages the old ones freed. (On Postgres, where a row is written
    anew either way, two updates took the real team 292.8 KB a session against 296.0: a
    delete and insert adds every index entry again.) Returns the rows deleted."""
    deleted = conn.execute(_DELETE_SEGMENT, at).rowcount
    first, rest = dict(rows[0]._mapping), [dict(r._mapping) for r in rows[1:]]
    first.update(record=record, raw_response=response)
    for row in rest:
        row.update(record=b"", raw_response=b"")
    conn.execute(exchanges.insert(), [first, *rest])
    return deleted
