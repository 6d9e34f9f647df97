"""Retention: delete old sessions, then the blobs no session names, then the packs they lived in.

collect(store, older_than, dry_run) does, in order:
1. Sessions that started more than `older_than` seconds ago are deleted with their exchanges
   (and whatever else hangs off a session by foreign key). A session still being recorded
   (status "recording") is kept whatever its age.
2. The blobs in question are those the deleted sessions named (store.content.referenced:
   system prompts, tool lists, parameters, messages, answers; layout-1 rows name none). One
   is live if a remaining manifest names it. Each session's row keeps the pack groups its
   manifests name blobs in (store.kept, `pack_groups`: the writer keeps them as it writes),
   so a remaining session is decoded only while one of its groups still holds a blob in
   question that no session was found to name yet, or when it has no valid kept groups (then
   they are found and kept). Blobs in a group no remaining session names are not live
   either. A blob nothing ever named in a group that sessions still name (a writer that died
   between its blobs and its exchanges) stays until its group is no longer named.
3. A blob that is not live and that no writer touched in the last GRACE seconds is deleted.
   Writers touch the blobs they reuse at least every write.FRESH_FOR seconds (far less than
   GRACE) inside the transaction that names them, and gc's DELETE checks touched_at again, so
   a blob a recorder is about to name is never taken from under it.
4. A pack group whose packs no blob lives in any more is deleted; a group in which live blobs
   are less than half of the bytes is repacked: its live blobs move to a new group of one
   pack, and the old group is deleted. Groups with a pack younger than GRACE are left alone,
   because their writer may still append to them (encoder.PACK_IDLE < GRACE). Sessions
   that kept a group dropped or repacked lose their kept groups (their blobs moved), in the
   transaction that replaces the group.
5. A SQLite file made with auto_vacuum = INCREMENTAL (every new one) gives the pages freed
   back to the file system (store.engine.give_back_pages).
With `dry_run`, nothing is deleted and the report says what would be.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import orjson
import sqlalchemy as sa

from forge_record.errors import StoreError
from forge_record.store import compression, content, dictionaries, kept, sealed
from forge_record.store.batch import exclude_writers, groups_of, new_pack
from forge_record.store.engine import give_back_pages
from forge_record.store.reader import BlobReader, chunks
from forge_record.store.schema import LAYOUT_RECORD, BlobName, blobs, exchanges, packs, sessions
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
    # One connection throughout: the live sets are temporary tables of it.
    with store.reading("find live blobs") as conn:
        for table in _TEMPORARY:
            table.drop(conn, checkfirst=True)
            table.create(conn)
        try:
            _candidates(conn, doomed)
            conn.commit()  # what follows reads after the deletion
            if not dry_run and doomed:
                with store.transaction("delete sessions") as writing:
                    for part in chunks(doomed):
                        writing.execute(sessions.delete().where(sessions.c.id.in_(part)))
            _mark_live(store, conn, skip=set(doomed))
            conn.commit()
            dying = _dying(conn, now - grace)
            dead = [(h, n) for h, n in conn.execute(
                sa.select(blobs.c.hash, blobs.c.length).where(dying))]
            report.blobs, report.blob_bytes = len(dead), sum(n for _, n in dead)
            if not dry_run and dead:
                with store.transaction("delete blobs") as writing:
                    for part in chunks([h for h, _ in dead]):
                        writing.execute(blobs.delete().where(
                            blobs.c.hash.in_(part), blobs.c.touched_at < now - grace))
            _sweep_packs(store, conn, report, dry_run, ~dying, now - grace)
        finally:
            for table in _TEMPORARY:
                table.drop(conn, checkfirst=True)
            conn.commit()
    if not dry_run and (report.sessions or report.blobs or report.groups or report.repacked):
        with store.transaction("give freed pages back") as conn:
            give_back_pages(conn)  # a SQLite file shrinks by what gc freed
    return report


def _old_sessions(store: Store, cutoff: float, report: Report, now: float) -> list[str]:
    with store.reading("find old sessions") as conn:
        query = sa.select(sessions).where(sessions.c.started_at < cutoff)
        doomed = []
        for row in conn.execute(query).mappings():
            if status(row, now) == "recording":
                report.kept_recording += 1
            else:
                doomed.append(row["id"])
        for part in chunks(doomed):
            report.exchanges += conn.scalar(sa.select(sa.func.count()).select_from(exchanges)
                                            .where(exchanges.c.session_id.in_(part)))
    report.sessions = len(doomed)
    return doomed


# What gc knows, as temporary tables of its connection (not Python sets, so that its memory
# does not grow with the store):
# - forge_gc_open: the candidates, blobs a deleted session named (with their pack group), less
#   those a remaining session was found to name;
# - forge_gc_named: the pack groups remaining sessions name blobs in.
# A blob untouched for the grace period dies if it is an open candidate, or if its group is
# one no remaining session names. So only deleted sessions' names are ever in question, and a
# remaining session is decoded only while it may name an open candidate (its kept groups hold
# one) or has no kept groups yet.
_OPEN = sa.Table("forge_gc_open", sa.MetaData(), sa.Column("hash", BlobName, primary_key=True),
                 sa.Column("group_id", sa.BigInteger), prefixes=["TEMPORARY"])
_NAMED = sa.Table("forge_gc_named", sa.MetaData(),
                  sa.Column("group_id", sa.BigInteger, primary_key=True), prefixes=["TEMPORARY"])
_TEMPORARY = (_OPEN, _NAMED)
_ADD_NAMED = sa.text("INSERT INTO forge_gc_named (group_id) VALUES (:group_id) "
                     "ON CONFLICT DO NOTHING")
_SESSION_MANIFESTS = sa.select(exchanges.c.segment, exchanges.c.piece, exchanges.c.record).where(
    exchanges.c.session_id == sa.bindparam("session_id"), exchanges.c.layout != LAYOUT_RECORD
).order_by(exchanges.c.segment, exchanges.c.piece)
# The pack groups a list of blob names lie in: one statement, compiled once (gc asks it for
# every session whose groups it has not kept yet: 10,000 times on a store of 1M exchanges).
_KEEP_EVERY = 500  # sessions whose groups were computed, kept in one transaction
_NAMED_EVERY = 5000  # groups held before they go into forge_gc_named


def _candidates(conn: sa.Connection, ids: list[str]) -> None:
    """The blobs the sessions `ids` name, with their groups, into forge_gc_open."""
    for sid in ids:
        for part in chunks(sorted(_names(conn, sid))):
            conn.execute(sa.insert(_OPEN).from_select(
                ["hash", "group_id"],
                sa.select(blobs.c.hash, packs.c.group_id)
                .select_from(blobs.join(packs, packs.c.id == blobs.c.pack_id))
                .where(blobs.c.hash.in_(part),
                       ~sa.select(_OPEN.c.hash).where(_OPEN.c.hash == blobs.c.hash).exists())))


def _mark_live(store: Store, conn: sa.Connection, skip: set[str]) -> None:
    """One pass over the remaining sessions: the groups each names blobs in (kept, or found
    from its manifests and then kept) go into forge_gc_named, and the open candidates it
    names are closed. A session with kept groups is decoded only if one of them still holds
    an open candidate."""
    computed: dict[str, tuple[dict, int]] = {}
    named: set[int] = set()
    open_groups = set(conn.scalars(sa.select(_OPEN.c.group_id).distinct()))
    for row in kept.figures(conn, kept.PACK_GROUPS):
        if row["id"] in skip:
            continue
        groups, names = _groups(conn, row)
        if row["figure"] is None and status(row) != "recording":
            computed[row["id"]] = ({"groups": sorted(groups)}, row["held"])
        named |= groups
        if len(named) >= _NAMED_EVERY:  # one statement for many sessions, not one each
            _add_named(conn, named)
        if groups & open_groups:
            names = names if names is not None else _names(conn, row["id"])
            for part in chunks(sorted(names)):
                conn.execute(_OPEN.delete().where(_OPEN.c.hash.in_(part)))
            open_groups = set(conn.scalars(sa.select(_OPEN.c.group_id).distinct()))
        if len(computed) >= _KEEP_EVERY:
            store.keep(kept.PACK_GROUPS, computed)
            computed = {}
    _add_named(conn, named)
    store.keep(kept.PACK_GROUPS, computed)


def _add_named(conn: sa.Connection, groups: set[int]) -> None:
    if groups:
        conn.execute(_ADD_NAMED, [{"group_id": g} for g in sorted(groups)])
        groups.clear()


def _groups(conn: sa.Connection, row: dict) -> tuple[set[int], set[str] | None]:
    """The groups the session names blobs in, and the names if they had to be read."""
    if row["figure"] is not None:
        return set(row["figure"]["groups"]), None
    names = _names(conn, row["id"])
    return set(groups_of(conn, list(names)).values()), names


def _names(conn: sa.Connection, session_id: str) -> set[str]:
    names: set[str] = set()
    for found in _session_manifests(conn, session_id):
        names.update(content.referenced(found))
    return names


def _session_manifests(conn: sa.Connection, session_id: str):
    """The session's manifests, each segment's stream decoded once."""
    rows = conn.execute(_SESSION_MANIFESTS, {"session_id": session_id}).all()
    start = 0
    while start < len(rows):
        segment = rows[start][0]
        end = start
        while end < len(rows) and rows[end][0] == segment:
            end += 1
        part = rows[start:end]
        if [r[1] for r in part] != list(range(len(part))):
            raise StoreError(f"session {session_id} segment {segment} has missing pieces")
        for plain in sealed.manifest_plains([r[2] for r in part]):
            yield orjson.loads(plain)
        start = end


def _dying(conn: sa.Connection, untouched_since: float) -> sa.ColumnElement[bool]:
    """Blobs no writer touched since `untouched_since` that are open candidates or in a group
    no remaining session names."""
    candidate = sa.select(_OPEN.c.hash).where(_OPEN.c.hash == blobs.c.hash).exists()
    named = (sa.select(_NAMED.c.group_id)
             .where(_NAMED.c.group_id == packs.c.group_id, packs.c.id == blobs.c.pack_id)
             .exists())
    return sa.and_(blobs.c.touched_at < untouched_since, sa.or_(candidate, ~named))


def _forget_groups(conn: sa.Connection, group: int) -> None:
    """Sessions whose kept groups name `group` lose them (its blobs moved or went); the next
    gc finds them again. Run in the transaction that drops or repacks the group, which no
    writer overlaps (store.batch.REPACK_LOCK): every figure a writer kept from the old group
    is committed and seen here, and a gc stopped midway never leaves a figure naming a group
    that is gone (the next gc would trust it, and take the blobs of the new group for
    unnamed). Group ids are 62-bit random numbers: the text match finds the few figures to
    read, not the ones to clear."""
    query = (sa.select(sessions.c.id, sessions.c.pack_groups)
             .where(sa.cast(sessions.c.pack_groups, sa.Text).like(f"%{group}%")))
    stale = sorted(sid for sid, figure in conn.execute(query)
                   if isinstance(figure, dict) and group in figure.get("groups", ()))
    for part in chunks(stale):
        conn.execute(sessions.update().where(sessions.c.id.in_(part)).values(pack_groups=None))


def _sweep_packs(store: Store, conn: sa.Connection, report: Report, dry_run: bool,
                 stays: sa.ColumnElement[bool], young: float) -> None:
    """Drop or repack the old groups whose blobs went (or, dry, would go). Sums per group
    are SQL's, so only the groups acted on are held."""
    held = (sa.select(packs.c.group_id, sa.func.count().label("names"),
                      sa.func.sum(blobs.c.length).label("bytes"))
            .select_from(blobs.join(packs, packs.c.id == blobs.c.pack_id))
            .where(stays).group_by(packs.c.group_id).subquery())
    groups = (sa.select(packs.c.group_id, sa.func.sum(packs.c.size),
                        sa.func.sum(sa.func.length(packs.c.data)),
                        sa.func.max(packs.c.created_at))
              .group_by(packs.c.group_id).subquery())
    query = (sa.select(groups.c.group_id, groups.c[1], groups.c[2], held.c.names, held.c.bytes)
             .select_from(groups.outerjoin(held, held.c.group_id == groups.c.group_id))
             .where(groups.c[3] < young))
    todo = []
    kept = set(conn.scalars(dictionaries.GROUPS))  # never changed: they are dictionaries
    for group, plain, stored, names, live_bytes in conn.execute(query):
        if group in kept or names and (live_bytes or 0) * 2 >= plain:
            continue
        report.pack_bytes += stored
        if names:
            report.repacked += 1
        else:
            report.groups += 1
        todo.append((group, bool(names)))
    if dry_run or not todo:
        return
    # The blobs that move, in one pass over blobs (no index on pack_id: see schema.blobs).
    moving: dict[int, list[str]] = {g: [] for g, repack in todo if repack}
    if moving:
        query = (sa.select(packs.c.group_id, blobs.c.hash)
                 .select_from(blobs.join(packs, packs.c.id == blobs.c.pack_id)).where(stays))
        for group, blob in conn.execute(query):
            if group in moving:
                moving[group].append(blob)
    for group, _ in todo:
        _replace_group(store, group, moving.get(group, []))


def _replace_group(store: Store, group: int, names: list[str]) -> None:
    """Move `names` to a new group of one pack, then drop the old group and forget the kept
    figures that name it, all in one transaction, which no writer overlaps."""
    with store.transaction(f"repack group {group}") as conn:
        exclude_writers(conn)  # first: see store.batch.REPACK_LOCK
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
        _forget_groups(conn, group)
