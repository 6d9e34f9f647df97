"""Retention: delete old sessions, then the blobs no session names, then the packs they lived in.

collect(store, older_than, dry_run) does, in order:
1. Sessions that started more than `older_than` seconds ago are deleted with their exchanges
   (and whatever else hangs off a session by foreign key). A session still being recorded
   (status "recording") is kept whatever its age.
2. The live blobs are every blob a remaining manifest names (store.content.referenced):
   system prompts, tool lists, parameters, messages, answers. Layout-1 rows name none.
3. A blob that is not live and that no writer touched in the last GRACE seconds is deleted.
   Writers touch the blobs they reuse at least every write.FRESH_FOR seconds (far less than
   GRACE) inside the transaction that names them, and gc's DELETE checks touched_at again, so
   a blob a recorder is about to name is never taken from under it.
4. A pack group whose packs no blob lives in any more is deleted; a group in which live blobs
   are less than half of the bytes is repacked: its live blobs move to a new group of one
   pack, and the old group is deleted. Groups with a pack younger than GRACE are left alone,
   because their writer may still append to them (encoder.PACK_IDLE < GRACE).
With `dry_run`, nothing is deleted and the report says what would be.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import sqlalchemy as sa

from forge_record.store import compression, content, dictionaries
from forge_record.store.batch import new_pack
from forge_record.store.reader import BlobReader, chunks, segment_manifests
from forge_record.store.schema import LAYOUT_RECORD, blobs, exchanges, packs, sessions
from forge_record.store.segments import spans
from forge_record.store.store import Store
from forge_record.store.summary import status

GRACE = 3600.0


@dataclass
class Report:
    sessions: int = 0
    exchanges: int = 0
    kept_recording: int = 0  # old sessions spared because they are still being recorded
    blobs: int = 0
    blob_bytes: int = 0  # plain bytes
    groups: int = 0  # pack groups deleted
    repacked: int = 0  # pack groups rewritten
    pack_bytes: int = 0  # stored bytes freed


def collect(store: Store, older_than: float, dry_run: bool = False, grace: float = GRACE,
            now: float | None = None) -> Report:
    now = time.time() if now is None else now
    report = Report()
    doomed = _old_sessions(store, now - older_than, report, now)
    if not dry_run and doomed:
        with store.transaction("delete sessions") as conn:
            for part in chunks(doomed):
                conn.execute(sessions.delete().where(sessions.c.id.in_(part)))
    with store.reading("find live blobs") as conn:
        live = _live_blobs(conn, skip=set(doomed) if dry_run else set())
        dead = [(h, n) for h, n, t in conn.execute(
            sa.select(blobs.c.hash, blobs.c.length, blobs.c.touched_at))
            if h not in live and t < now - grace]
    report.blobs, report.blob_bytes = len(dead), sum(n for _, n in dead)
    if not dry_run and dead:
        with store.transaction("delete blobs") as conn:
            for part in chunks([h for h, _ in dead]):
                conn.execute(blobs.delete().where(blobs.c.hash.in_(part),
                                                  blobs.c.touched_at < now - grace))
    _sweep_packs(store, report, dry_run, {h for h, _ in dead}, now - grace)
    return report


def _old_sessions(store: Store, cutoff: float, report: Report, now: float) -> list[str]:
    with store.reading("find old sessions") as conn:
        query = sa.select(sessions).where(sessions.c.started_at < cutoff)
        rows = conn.execute(query).mappings().all()
        doomed = []
        for row in rows:
            if status(row, now) == "recording":
                report.kept_recording += 1
            else:
                doomed.append(row["id"])
        for part in chunks(doomed):
            report.exchanges += conn.scalar(sa.select(sa.func.count()).select_from(exchanges)
                                            .where(exchanges.c.session_id.in_(part)))
    report.sessions = len(doomed)
    return doomed


def _live_blobs(conn: sa.Connection, skip: set[str]) -> set[str]:
    live: set[str] = set()
    segments = conn.execute(
        sa.select(exchanges.c.session_id, exchanges.c.segment).distinct()
        .where(exchanges.c.layout != LAYOUT_RECORD)).all()
    for session_id, segment in segments:
        if session_id not in skip:
            for found in segment_manifests(conn, session_id, segment).values():
                live.update(content.referenced(found))
    return live


def _sweep_packs(store: Store, report: Report, dry_run: bool, dying: set[str],
                 young: float) -> None:
    with store.reading("size pack groups") as conn:
        groups = conn.execute(sa.select(
            packs.c.group_id, sa.func.sum(packs.c.size), sa.func.sum(sa.func.length(packs.c.data)),
            sa.func.max(packs.c.created_at)).group_by(packs.c.group_id)).all()
        held: dict[int, list[str]] = {}  # group -> its blobs that stay
        held_bytes: dict[int, int] = {}
        query = sa.select(packs.c.group_id, blobs.c.hash, blobs.c.length).join(
            packs, packs.c.id == blobs.c.pack_id)
        for group, blob, length in conn.execute(query):
            if blob not in dying:
                held.setdefault(group, []).append(blob)
                held_bytes[group] = held_bytes.get(group, 0) + length
        kept = set(conn.scalars(dictionaries.GROUPS))  # never changed: they are dictionaries
    for group, plain, stored, newest in groups:
        if newest >= young or group in kept:
            continue
        names, live_bytes = held.get(group, []), held_bytes.get(group, 0)
        if names and live_bytes * 2 >= plain:
            continue
        report.pack_bytes += stored
        if names:
            report.repacked += 1
        else:
            report.groups += 1
        if not dry_run:
            _replace_group(store, group, names)


def _replace_group(store: Store, group: int, names: list[str]) -> None:
    """Move `names` to a new group of one pack, then drop the old group."""
    with store.transaction(f"repack group {group}") as conn:
        if names:
            reader = BlobReader(conn)
            reader.load(names)
            datas = [reader.get(n) for n in names]
            piece = compression.Stream().piece(b"".join(datas))
            pack_id = new_pack(conn, secrets.randbits(62), piece, sum(map(len, datas)),
                               time.time())
            move = blobs.update().where(blobs.c.hash == sa.bindparam("name")).values(
                pack_id=pack_id, start=sa.bindparam("at"), length=sa.bindparam("size"))
            conn.execute(move, [{"name": n, "at": at, "size": size}
                                for n, (at, size) in zip(names, spans(datas), strict=True)])
        conn.execute(packs.delete().where(packs.c.group_id == group))
