"""The write path: a batch of items (new sessions, exchanges, ends) in one transaction.

`Writes.apply(conn, items)` runs inside a transaction the caller opened and commits; if the
transaction fails, the caller calls `forget()` so the encoders of the sessions involved start
over (see store.segments). Within a batch, sessions are added first, then exchanges, then ends.

Blobs are shared by every session in the store, and other recorders write at the same time,
so each batch:
1. touches the blobs its exchanges name that this process has not touched in the last
   FRESH_FOR seconds (`UPDATE ... SET touched_at RETURNING hash`, one statement, names in
   sorted order so concurrent writers lock rows in the same order);
2. packs the ones no row answered for into one new piece of the session's pack stream, and
   inserts them with ON CONFLICT DO NOTHING (another writer may have inserted the same blob
   meanwhile; its copy wins and ours is dead weight in our pack).
gc deletes only blobs untouched for longer than its grace period (much longer than FRESH_FOR)
that no committed manifest names, so a blob a writer relies on without touching was touched
by it recently. If gc deleted a blob just before step 1, step 1 misses it and step 2 writes
it again.

Each batch also keeps its sessions' pack groups (store.kept `pack_groups`): the groups of the
blobs each exchange names that its parent does not, added under the session row's lock to a
figure that was valid (see keep_groups, and REPACK_LOCK for gc's repacks).

With `if_absent`, items already stored are skipped instead of failing (a session or an
exchange with the same key): spool replay and push use it, so repeating them is harmless.

`serve`'s exchanges come numbered with the number their call took as it started
(store.numbering), or unnumbered (AddExchange.numbered False): those take their session's next
number from `gateway_sessions` (next_seq, the one sequence every replica numbers from) in the
same transaction as their insert; replayed twice, such an exchange is known by its session,
start time and URL instead of its number. A call's start (StartCall) reaches a batch only from
a spool (the writer process numbers the starts it reads, store.numbering): it is too late to
number anything then, so only how the call named its session is recorded.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import math
import secrets
import time
from collections import OrderedDict
from typing import Any

import sqlalchemy as sa

from forge_record.errors import SessionNotFound
from forge_record.identity import blob_key, blob_key_name
from forge_record.records import (
    RECORD_VERSION,
    Exchange,
    Response,
    ToolCall,
    session_to_dict,
)
from forge_record.redact.headers import SECRET_HEADERS
from forge_record.redact.urls import redact_url
from forge_record.store import dictionaries, kept
from forge_record.store.items import AddExchange, AddSession, EndSession, Item, StartCall
from forge_record.store.reader import chunks
from forge_record.store.schema import (
    LAYOUT_CONTENT,
    blobs,
    exchanges,
    gateway_sessions,
    packs,
    sessions,
)
from forge_record.store.segments import (
    SEGMENT_BYTES,
    Encoded,
    FinishedSegment,
    LastPack,
    PackStream,
    Seen,
    SessionEncoder,
    Written,
)

FRESH_FOR = 600.0
BEAT_EVERY = 30.0  # well under summary.STALE_AFTER
TOKEN_COLUMNS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
# Sessions whose encoder is kept between batches, least recently written first out: while
# there are fewer than _ENCODERS and their footprints add up to less than ENCODER_BYTES.
# `serve` writes more rollouts at once than that holds (~150 small ones). A session whose
# encoder was let go keeps its tail (the last exchanges of its chains, a few raw bodies'
# worth, within TAIL_BYTES), and its next segment resumes from it (store.segments). Without
# a tail a new segment has no parent: written a segment a call, the 150-call bench session's
# payload was 3.8x what it is written whole; resumed, 1.2x (docs/BENCHMARKS.md).
_ENCODERS = 4096
ENCODER_BYTES = 256 << 20
TAIL_BYTES = 64 << 20
# A harness version with no dictionary yet is asked again after this many seconds, not on
# every new encoder: under `serve`, encoders are made all the time, and a miss cost a query.
# Which dictionary a stream starts from never matters for reading it back.
MISS_FOR = 30.0
_INSERT_EXCHANGE = exchanges.insert()
_LAST_SEGMENT = sa.select(sa.func.max(exchanges.c.segment)).where(
    exchanges.c.session_id == sa.bindparam("session_id"))


class Writes:
    """Encoder state and the blob freshness cache of one Store; used under its write lock."""

    def __init__(self) -> None:
        self._encoders: OrderedDict[str, SessionEncoder] = OrderedDict()
        # Each kept encoder's footprint as last measured, and their sum: measuring all of them
        # whenever one is made cost O(sessions) a new encoder, which `serve` makes per call.
        self._footprints: dict[str, int] = {}
        self._held = 0
        self._tails: OrderedDict[str, list[Seen]] = OrderedDict()  # sessions whose encoder went
        self._tails_held = 0
        # The pack stream resumed segments share, by the dictionary it starts from: a session
        # resumed call after call then adds its blobs to one group (to a new one every 4 MB,
        # the full one sealed) instead of a group a call, each listed in its figure of pack
        # groups.
        self._shared: dict[int | None, PackStream] = {}
        self._fresh: dict[str, float] = {}
        self._beats: dict[str, float] = {}  # session -> last heartbeat written with a batch
        self._own: dict[str, dict] = {}  # session -> the pack groups figure it wrote last
        self._dictionaries: dict[str, tuple[int, bytes]] = {}  # harness -> (id, plain bytes)
        self._missed: dict[str, float] = {}  # harness -> when it had no dictionary
        # Pack groups and segments no writer will add to, to seal (store.seal) once the
        # batch that finished them committed: `sealable`, which the Store seals after its
        # write.
        self._finished: list[Written | FinishedSegment] = []
        self.sealable: list[Written | FinishedSegment] = []

    def apply(self, conn: sa.Connection, items: list[Item], *, if_absent: bool = False) -> set:
        """Write `items`; returns the blob names to mark fresh once the caller committed."""
        now = time.time()
        adds = [i for i in items if isinstance(i, AddExchange)]
        if adds:
            hold_off_repacks(conn)  # first, before this transaction locks any row
        for item in items:
            if isinstance(item, AddSession):
                _add_session(conn, item, if_absent)
            elif isinstance(item, StartCall) and item.named_by is not None:
                note_named_by(conn, item.session_id, item.named_by)
        touched = self._add_exchanges(conn, adds, if_absent, now) if adds else set()
        for item in items:
            if isinstance(item, EndSession):
                _end_session(conn, item)
                encoder = self._encoders.get(item.session_id)
                if encoder is not None:
                    self._offer(conn, encoder, encoder.offer_dictionary(ended=True))
                    self._finish(item.session_id, encoder)
                self._drop(item.session_id)  # an exchange after its end is rare
        return touched

    def committed(self, touched: set) -> None:
        now = time.time()
        self.sealable += self._finished
        self._finished = []
        self._fresh.update(dict.fromkeys(touched, now))
        if len(self._fresh) > 100_000:
            self._fresh = {k: t for k, t in self._fresh.items() if now - t < FRESH_FOR}

    def forget(self, session_ids: set[str]) -> None:
        """After a failed write: its sessions' encoders and tails, and the shared pack
        streams, may hold pieces that were never committed (none of them is sealed)."""
        self._finished = []
        for sid in session_ids:
            self._drop(sid)
            self._beats.pop(sid, None)
        self._shared.clear()

    def closing(self) -> None:
        """Its writer will write no more (Store.close): every segment and pack group it holds
        becomes sealable, the streams that resumed segments share too (no encoder will pack
        into them again), and every encoder and tail goes."""
        for sid, encoder in self._encoders.items():
            self._finish(sid, encoder)
        self._finished += [s.written for s in self._shared.values() if s.fed]
        self.sealable += self._finished
        self._finished = []
        self._shared.clear()
        for sid in [*self._encoders, *self._tails]:
            self._drop(sid)

    def _add_exchanges(self, conn, adds: list[AddExchange], if_absent: bool, now: float) -> set:
        if if_absent:
            adds = _not_yet_stored(conn, adds)
        encoded: list[tuple[str, Exchange, Encoded, SessionEncoder]] = []
        for add in adds:
            ex = cleaned(add.exchange)
            if not add.numbered:
                ex = dataclasses.replace(ex, seq=next_seq(conn, add.session_id))
            encoder = self._encoder(conn, add.session_id, ex)
            encoded.append((add.session_id, ex, encoder.encode(ex), encoder))
        touched, group_of = self._store_blobs(conn, encoded, now)
        for sid in {sid for sid, _, _, _ in encoded}:
            self._measure(sid)
        if encoded:
            conn.execute(_INSERT_EXCHANGE, [_row(sid, ex, enc) for sid, ex, enc, _ in encoded])
            # Each session's pack groups: those of the blobs each exchange names that its
            # parent does not (what the parent names was kept with the parent's batch).
            added: dict[str, tuple[set[int], int]] = {}
            for sid, _, enc, _ in encoded:
                groups, n = added.get(sid, (set(), 0))
                groups.update(group_of[b] for b in enc.blobs if b in group_of)
                added[sid] = (groups, n + 1)
            # A batch says its recorder is alive; every BEAT_EVERY seconds is often enough.
            beat = {sid for sid in added if now - self._beats.get(sid, 0.0) >= BEAT_EVERY}
            kept = keep_groups(conn, added, now, beat, self._own)
            self._own.update((sid, figure) for sid, figure in kept.items()
                             if sid in self._encoders or sid in self._tails)
            self._beats.update(dict.fromkeys(beat, now))
        return touched

    def _encoder(self, conn: sa.Connection, session_id: str, ex: Exchange) -> SessionEncoder:
        enc = self._encoders.get(session_id)
        if enc is None or enc.full:
            if enc is not None:
                self._finish(session_id, enc)
            _lock_segments(conn, session_id)
            last = conn.scalar(_LAST_SEGMENT, {"session_id": session_id})
            tail = self._take_tail(session_id) if enc is None else []
            # Its last segment may be this transaction's, not yet inserted.
            mine = enc.segment if enc else max((s.segment for s in tail), default=-1)
            floor = max(-1 if last is None else last, mine)
            harness = dictionaries.key(ex)
            dictionary = self._dictionary(conn, harness)
            # A session with segments but no encoder here was let go (or its write failed):
            # its new segment packs into the shared stream.
            shared = self._shared_packs(dictionary) if enc is None and last is not None else None
            enc = SessionEncoder(segment=floor + 1, harness=harness, dictionary=dictionary,
                                 packs=shared, resumes=tail)
            self._encoders[session_id] = enc
            self._measure(session_id)
            self._make_room()
        self._encoders.move_to_end(session_id)
        return enc

    def _shared_packs(self, dictionary: tuple[int, bytes] | None) -> PackStream:
        key = dictionary[0] if dictionary else None
        packs = self._shared.get(key)
        if packs is None or packs.fed >= SEGMENT_BYTES:
            full, packs = packs, PackStream(dictionary)
            self._shared[key] = packs
            if full is not None:
                # The encoders packing into it go on in the new one (a blob's group is
                # found by its row, never by its segment), so it is finished: sealed once
                # this batch commits, as an encoder's own group is when it fills.
                for encoder in self._encoders.values():
                    if encoder.packs is full:
                        encoder.packs = packs
                self._finished += [*full.idled, full.written]
        return packs

    def _make_room(self) -> None:
        """Drop the least recently written encoders, the newest one aside, while over either
        bound. Checked as an encoder is added: one grows by at most a segment after that."""
        while len(self._encoders) > 1 and (len(self._encoders) > _ENCODERS
                                           or self._held > ENCODER_BYTES):
            self._retire(next(iter(self._encoders)))
        while self._tails_held > TAIL_BYTES:
            self._drop(next(iter(self._tails)))

    def _measure(self, session_id: str) -> None:
        """Its encoder's footprint again, after it was made or wrote a batch."""
        encoder = self._encoders.get(session_id)
        if encoder is not None:
            now = encoder.footprint
            self._held += now - self._footprints.get(session_id, 0)
            self._footprints[session_id] = now

    def _retire(self, session_id: str) -> None:
        """Let its encoder go and keep its tail, for the session's next segment to resume
        from (it and the figure of pack groups are this batch's or committed: a batch that
        fails forgets every session it wrote)."""
        encoder = self._encoders.pop(session_id)
        self._held -= self._footprints.pop(session_id, 0)
        self._finish(session_id, encoder)
        if tail := encoder.tail:
            self._tails[session_id] = tail
            self._tails_held += sum(s.footprint for s in tail)
        else:
            self._own.pop(session_id, None)

    def _finish(self, session_id: str, encoder: SessionEncoder) -> None:
        """No exchange will be added to its segment: to seal once this batch committed."""
        self._finished += encoder.finished
        self._finished.append(FinishedSegment(session_id, encoder.segment, encoder.pieces))

    def _take_tail(self, session_id: str) -> list[Seen]:
        tail = self._tails.pop(session_id, [])
        self._tails_held -= sum(s.footprint for s in tail)
        return tail

    def _drop(self, session_id: str) -> None:
        """Let its encoder and its tail go."""
        self._take_tail(session_id)
        self._encoders.pop(session_id, None)
        self._own.pop(session_id, None)
        self._held -= self._footprints.pop(session_id, 0)

    def _dictionary(self, conn: sa.Connection, harness: str) -> tuple[int, bytes] | None:
        """The harness version's dictionary; rows never change, so found ones are kept, and
        a miss for MISS_FOR seconds."""
        if harness not in self._dictionaries:
            if time.monotonic() - self._missed.get(harness, -MISS_FOR) < MISS_FOR:
                return None
            found = dictionaries.find(conn, harness)
            if found is None:
                self._missed[harness] = time.monotonic()
                return None
            self._dictionaries[harness] = found
        return self._dictionaries[harness]

    def _offer(self, conn: sa.Connection, encoder: SessionEncoder,
               made: tuple[int, int] | None) -> None:
        if made:
            dictionaries.offer(conn, encoder.harness, *made)
            self._missed.pop(encoder.harness, None)  # the next session looks it up

    def _store_blobs(self, conn, encoded: list, now: float) -> tuple[set, dict[str, int]]:
        """Store the blobs the batch brings; returns the names touched (to mark fresh once
        committed) and the pack group of every blob the batch names, as this transaction
        found it (see keep_groups for why it is exact)."""
        owner: dict[str, tuple[SessionEncoder, bytes]] = {}  # name -> (encoder bringing it, bytes)
        shared: set[str] = set()
        for _, _, enc, encoder in encoded:
            shared |= enc.shared
            for blob, data in enc.blobs.items():
                owner.setdefault(blob, (encoder, data))
        stale = sorted(b for b in owner if now - self._fresh.get(b, 0.0) >= FRESH_FOR)
        # Blobs other sessions may have stored (a system prompt, a first message) are looked
        # up first so their bytes are not stored twice; a message appended to this session's
        # own history is new, so it goes straight into the pack (one statement fewer).
        present = touch(conn, [b for b in stale if b in shared], now)
        missing: dict[int, list[str]] = {}  # by encoder
        for blob in stale:
            if blob not in present:
                missing.setdefault(id(owner[blob][0]), []).append(blob)
        group_of: dict[str, int] = {}
        for names in missing.values():
            encoder = owner[names[0]][0]
            datas = [owner[n][1] for n in names]
            piece, places = encoder.pack(datas)
            self._finished += encoder.packs.idled
            encoder.packs.idled.clear()
            made = store_piece(conn, encoder.packs, piece, names, datas, places, now,
                               encoder.dictionary_id)
            group_of.update(dict.fromkeys(made, encoder.group))
            self._offer(conn, encoder, encoder.offer_dictionary())
        # The group of every other blob an exchange names first in its session, as its row
        # now says: stored by another writer first (its row kept its pack), touched, or
        # touched lately by this process and not again (hot rows: the system prompt every
        # session names). No repack can move one before this transaction ends
        # (hold_off_repacks). In a growing session there are none: what a request adds is
        # new, or the answer before it, whose group its session keeps already.
        firsts = {b for _, _, enc, _ in encoded for b in enc.blobs if b not in enc.named}
        if rest := [b for b in firsts if b not in group_of]:
            group_of.update(groups_of(conn, rest))
        return set(stale), group_of


def _lock_segments(conn: sa.Connection, session_id: str) -> None:
    """Before a writer picks a new segment for a session: on Postgres, wait for any other
    writer doing the same for that session to commit (a transaction-scoped advisory lock), so
    that two writers of one session (replicas of `forge-record serve`) never pick the same
    segment. SQLite's BEGIN IMMEDIATE already serializes writers."""
    if conn.dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:8], "big", signed=True)
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


_TOUCH = (blobs.update().where(blobs.c.hash.in_(sa.bindparam("names", expanding=True)))
          .values(touched_at=sa.bindparam("now")).returning(blobs.c.hash))
_NEW_PACK = packs.insert().returning(packs.c.id)
_GROUPS_OF_PG = sa.text("SELECT b.hash, p.group_id FROM blobs b JOIN packs p ON p.id = "
                        "b.pack_id WHERE b.hash = ANY(:keys)")
_GROUPS_OF = (sa.select(blobs.c.hash, packs.c.group_id)
              .select_from(blobs.join(packs, packs.c.id == blobs.c.pack_id))
              .where(blobs.c.hash.in_(sa.bindparam("names", expanding=True))))
# On Postgres, gc's repacks and the transactions that insert exchanges never overlap: each
# of those takes this advisory lock shared, as its first statement, and a repack takes it
# exclusive (gc._replace_group). So the pack groups a writer reads for the blobs it names
# stay theirs until it commits, without locking the blob rows (SELECT ... FOR SHARE on the
# blobs it does not touch deadlocked two writers of one session, each holding a row the
# other's touch or upsert needed, and writes a lock into hot rows such as a system prompt's).
# Taken first, it is never waited for while holding a row lock, so it adds no deadlock.
# SQLite's BEGIN IMMEDIATE already serializes every writer and gc.
REPACK_LOCK = 0x6672706B  # "frpk"
_REPACK_LOCK_SHARED = sa.text("SELECT pg_advisory_xact_lock_shared(:key)")
_REPACK_LOCK = sa.text("SELECT pg_advisory_xact_lock(:key)")


def hold_off_repacks(conn: sa.Connection) -> None:
    """Keep gc from repacking until this transaction ends (see REPACK_LOCK)."""
    if conn.dialect.name == "postgresql":
        conn.execute(_REPACK_LOCK_SHARED, {"key": REPACK_LOCK})


def exclude_writers(conn: sa.Connection) -> None:
    """For gc's repack: wait for the writers in flight, and keep new ones waiting, until this
    transaction ends (see REPACK_LOCK)."""
    if conn.dialect.name == "postgresql":
        conn.execute(_REPACK_LOCK, {"key": REPACK_LOCK})


def touch(conn: sa.Connection, names: list[str], now: float) -> set[str]:
    """Mark these blobs as used now; returns the ones that exist. Names in sorted order, so
    that concurrent writers lock rows in the same order."""
    present: set[str] = set()
    for part in chunks(sorted(names)):
        present.update(conn.scalars(_TOUCH, {"names": part, "now": _touch_time(now)}))
    return present


def _touch_time(now: float) -> int:
    """A blob row's touched_at: `now` rounded up to a whole second, which gc's grace does not
    need finer and SQLite stores in 4 bytes instead of a REAL's 8 (2 KB of a real 150-call
    session's file). Up, so that a blob never looks older than it is."""
    return math.ceil(now)


def groups_of(conn: sa.Connection, names: list[str]) -> dict[str, int]:
    """The pack group of each of these blobs that exists, as this transaction finds it.
    Never cached across transactions: a repack moves blobs, and SQLite may give a deleted
    pack's id to a new pack."""
    found: dict[str, int] = {}
    if conn.dialect.name == "postgresql" and names:
        # One array parameter: the same statement text every time, which psycopg prepares
        # (an IN list is new text for every length, and psycopg caches at most 50 parameters).
        keys = [blob_key(n) for n in names]
        found.update((blob_key_name(bytes(k)), g) for k, g in conn.execute(_GROUPS_OF_PG,
                                                                           {"keys": keys}))
        return found
    for part in chunks(sorted(names)):
        found.update(conn.execute(_GROUPS_OF, {"names": part}).all())
    return found


def new_pack(conn: sa.Connection, group: int, piece: bytes, size: int, now: float,
             dictionary_id: int | None = None) -> int:
    return conn.scalar(_NEW_PACK, {"group_id": group, "size": size, "data": piece,
                                   "created_at": now, "dictionary_id": dictionary_id})


# The pack, then its blobs from three arrays (the same text for any count, so psycopg
# prepares it), each with whether its row is the one just made (not another writer's).
_PACK_WITH_BLOBS_PG = sa.text("""
WITH pack AS (
    INSERT INTO packs (group_id, size, data, created_at, dictionary_id)
    VALUES (:group_id, :size, :data, :created_at, :dictionary_id) RETURNING id)
INSERT INTO blobs (hash, pack_id, start, length, touched_at)
SELECT b.hash, pack.id, b.start, b.length, :touched_at
FROM pack, unnest(CAST(:keys AS bytea[]), CAST(:starts AS integer[]),
                  CAST(:lengths AS integer[])) AS b(hash, start, length)
ON CONFLICT (hash) DO UPDATE SET touched_at = excluded.touched_at
RETURNING blobs.hash, blobs.pack_id = (SELECT id FROM pack)""")


def insert_pack(conn: sa.Connection, group: int, piece: bytes, names: list[str],
                datas: list[bytes], places: list[tuple[int, int]], now: float,
                dictionary_id: int | None = None) -> set[str]:
    """One pack row and the blob rows that live in it; returns the names whose rows it made.
    A blob that exists already (another writer stored it meanwhile) keeps its row and is
    only touched: our copy is dead weight."""
    size = sum(len(d) for d in datas)
    if conn.dialect.name == "postgresql":
        # One statement for both: a round trip cost the writer ~0.2 ms of CPU, and the
        # server about as much.
        made = conn.execute(_PACK_WITH_BLOBS_PG, {
            "group_id": group, "size": size, "data": piece, "created_at": now,
            "touched_at": _touch_time(now), "dictionary_id": dictionary_id,
            "keys": [blob_key(n) for n in names],
            "starts": [s for s, _ in places], "lengths": [ln for _, ln in places]})
        return {blob_key_name(bytes(k)) for k, ours in made if ours}
    pack_id = new_pack(conn, group, piece, size, now, dictionary_id)
    return _blob_rows(conn, pack_id, names, places, now)


def _blob_rows(conn: sa.Connection, pack_id: int, names: list[str],
               places: list[tuple[int, int]], now: float) -> set[str]:
    touched = _touch_time(now)
    rows = [{"hash": n, "pack_id": pack_id, "start": s, "length": ln, "touched_at": touched}
            for n, (s, ln) in zip(names, places, strict=True)]
    made = conn.execute(_upsert_blobs(conn.dialect.name), rows)
    return {n for n, p in made if p == pack_id}


# On SQLite a stream's piece goes into the pack row it wrote last while that row holds less
# than GROW_UNDER bytes: a session written an exchange a transaction adds a piece of ~1 KB a
# call, and each row of its own cost ~115 bytes of row, index entry and overflow-page slack
# at 512-byte pages (a real 150-call Claude Code session: 158 pack rows against 20 when
# written eight exchanges a transaction, 27 KB of its 308 KB file). The row is rewritten
# whole, so it is kept small. Its created_at moves with it: gc spares a group whose newest
# pack is young, which a group still written to then is. A Postgres UPDATE leaves the old
# row version behind until vacuum, so there every piece is a row.
GROW_UNDER = 4096
_GROW_PACK = (packs.update().where(packs.c.id == sa.bindparam("pack_id"))
              .values(data=sa.bindparam("grown"), size=sa.bindparam("grown_size"),
                      created_at=sa.bindparam("now")))


def store_piece(conn: sa.Connection, stream: PackStream, piece: bytes, names: list[str],
                datas: list[bytes], places: list[tuple[int, int]], now: float,
                dictionary_id: int | None = None) -> set[str]:
    """`stream`'s next piece and the blobs in it, as insert_pack stores them; on SQLite in
    the row it wrote last while that is small (GROW_UNDER). Returns the names whose rows it
    made. The row is the stream's own (its group is no other writer's), and a failed
    transaction drops the stream with it (Writes.forget). The rows made are noted in the
    stream's `written`, for sealing the group (store.seal)."""
    size = sum(map(len, datas))
    if conn.dialect.name == "postgresql":
        made = insert_pack(conn, stream.group, piece, names, datas, places, now, dictionary_id)
    else:
        made = _sqlite_piece(conn, stream, piece, size, names, places, now, dictionary_id)
    at = stream.written.fed - size  # the piece's first plain byte in its group
    stream.written.made.extend((n, at + s) for n, (s, _) in zip(names, places, strict=True)
                               if n in made)
    return made


def _sqlite_piece(conn: sa.Connection, stream: PackStream, piece: bytes, size: int,
                  names: list[str], places: list[tuple[int, int]], now: float,
                  dictionary_id: int | None) -> set[str]:
    last = stream.last
    grown = last.data + piece if last and len(last.data) + len(piece) <= GROW_UNDER else None
    if grown and conn.execute(_GROW_PACK, {"pack_id": last.id, "grown": grown,
                                           "grown_size": last.size + size,
                                           "now": now}).rowcount == 1:
        pack_id, start, data = last.id, last.size, grown
    else:
        pack_id, start, data = new_pack(conn, stream.group, piece, size, now,
                                        dictionary_id), 0, piece
    stream.last = LastPack(pack_id, start + size, data)
    return _blob_rows(conn, pack_id, names, [(start + s, n) for s, n in places], now)


@functools.cache
def _upsert_blobs(dialect: str) -> Any:
    insert = _dialect(dialect).insert(blobs)
    return insert.on_conflict_do_update(
        index_elements=["hash"], set_={"touched_at": insert.excluded.touched_at}
    ).returning(blobs.c.hash, blobs.c.pack_id)


# Keeping sessions' pack groups (store.kept): the sessions' rows locked in id order (Postgres;
# SQLite's BEGIN IMMEDIATE serializes writers), with their exchanges counted. FOR NO KEY
# UPDATE, the lock the UPDATE takes anyway: FOR UPDATE would wait for the KEY SHARE lock
# another writer's exchange insert holds on the row (its foreign key) while that writer waits
# for ours, a deadlock. On Postgres the count in that statement is of its snapshot, taken
# before any wait for the lock, so it may miss what the writer we waited for committed: see
# keep_groups for when it is trusted, and _COUNT_EXCHANGES, a statement of its own after the
# lock, for when it is not.
_LOCK_SESSIONS = (sa.select(sessions.c.id, sessions.c.pack_groups, sessions.c.heartbeat_at,
                            sa.select(sa.func.count()).select_from(exchanges)
                            .where(exchanges.c.session_id == sessions.c.id)
                            .scalar_subquery().label("held"))
                  .where(sessions.c.id.in_(sa.bindparam("ids", expanding=True)))
                  .order_by(sessions.c.id).with_for_update(key_share=True))
_COUNT_EXCHANGES = (sa.select(exchanges.c.session_id, sa.func.count())
                    .where(exchanges.c.session_id.in_(sa.bindparam("ids", expanding=True)))
                    .group_by(exchanges.c.session_id))
_KEEP_GROUPS = (sessions.update().where(sessions.c.id == sa.bindparam("sid"))
                .values(pack_groups=sa.bindparam("figure"), heartbeat_at=sa.bindparam("beat")))
# A figure this writer kept, extended if it is still the session's (its mark: see _extend_own).
_EXTEND_OWN = (sessions.update()
               .where(sessions.c.id == sa.bindparam("sid"),
                      sessions.c.pack_groups["mark"].as_string() == sa.bindparam("mark"))
               .values(pack_groups=sa.bindparam("figure"),
                       heartbeat_at=sa.func.coalesce(sa.bindparam("beat", type_=sa.Double),
                                                     sessions.c.heartbeat_at)))


def keep_groups(conn: sa.Connection, added: dict[str, tuple[set[int], int]],
                now: float | None = None, beat: set[str] = frozenset(),
                own: dict[str, dict] | None = None) -> dict[str, dict]:
    """Extend the kept pack groups of the sessions in `added` ({id: (groups of the blobs
    this transaction's exchanges of it name, exchanges it inserted)}), after inserting them;
    and write `now` as the heartbeat of the sessions in `beat`. Returns the figures written.
    Two statements a batch of up to 500 sessions (lock and count; the figures with the
    heartbeats, one executemany), and at most two more: a count after the lock for sessions
    whose figure the first count does not extend, the heartbeats of sessions with no figure
    to extend. A batch of one session whose figure is the one in `own` (the figures this
    writer wrote last) takes one statement (_extend_own): `run`'s writer, call after call.

    A session's figure is extended only if it was valid for the exchanges it held before this
    transaction (count - inserted), or there were none; otherwise it is left stale for gc to
    compute. Why that is exact with several writers of one session (serve's replicas) and
    gc running:
    - Writers: each extends the figure under the row lock, after its own inserts, and counts
      after the lock is granted, so it counts what the previous holder committed with its
      figure: the counts add up, and a writer that finds a count it cannot account for
      (rows inserted by anything that does not keep the figure) leaves it stale for good.
      The count taken with the lock is of the snapshot before any wait for it; it is used
      only where it extends the figure (figure's count + inserted == it, or inserted == it).
      That is sound: the figure written says that count, so it is valid later only if no
      exchange committed after that snapshot; and if none did, the snapshot's count is the
      count after the lock. Where it does not fit, the sessions are counted again.
    - gc's repack moves blobs to a new group (`UPDATE blobs SET pack_id`) and deletes the old
      group's packs, and in the same transaction, after those, forgets the figures naming the
      old group (gc._replace_group). Repacks and writers' transactions do not overlap
      (REPACK_LOCK; SQLite serializes all of them): a writer that began after the repack
      committed reads the new groups; one that began before it commits before the repack
      starts, so the repack sees its figure and forgets it if it names the old group. A
      figure extended after that reads the forgotten one (stale: left alone) or names only
      groups that exist. Blobs packed in this transaction are in this writer's young groups,
      which gc never repacks.
    - A gc that stops between its repacks leaves no figure naming a group that is gone: each
      repack forgets in its own transaction.
    The caller took hold_off_repacks first in the transaction."""
    if own and len(added) == 1 and (sid := next(iter(added))) in own:
        figure = _extend_own(conn, sid, own[sid], *added[sid], now if sid in beat else None)
        if figure is not None:
            return {sid: figure}
    ids = sorted(added)
    rows: dict[str, Any] = {}
    for part in chunks(ids):
        rows.update((r.id, r) for r in conn.execute(_LOCK_SESSIONS, {"ids": part}))

    def extended(sid: str, count: int) -> dict | None:
        groups, inserted = added[sid]
        before = count - inserted
        old = kept.valid(rows[sid].pack_groups, before)
        if before == 0 or old is not None:
            return _figure(set(old["groups"] if old else ()) | groups, count)
        return None

    figures = {sid: extended(sid, rows[sid].held) for sid in ids if sid in rows}
    again = [sid for sid, figure in figures.items() if figure is None]
    for part in chunks(again):
        for sid, count in conn.execute(_COUNT_EXCHANGES, {"ids": part}):
            figures[sid] = extended(sid, count)
    writes, beats = [], []
    for sid, figure in figures.items():
        if figure is not None:
            writes.append({"sid": sid, "figure": figure,
                           "beat": now if sid in beat else rows[sid].heartbeat_at})
        elif sid in beat:
            beats.append(sid)
    if writes:
        conn.execute(_KEEP_GROUPS, writes)
    if beats:
        conn.execute(sessions.update().where(sessions.c.id.in_(beats)).values(heartbeat_at=now))
    return {w["sid"]: w["figure"] for w in writes}


def _extend_own(conn: sa.Connection, sid: str, last: dict, groups: set[int], inserted: int,
                beat: float | None) -> dict | None:
    """The session's figure extended in one statement, without counting its exchanges, if it
    is still `last`, the figure this writer wrote: its mark is still there. Then the session
    holds `last`'s exchanges and this transaction's, no more, because since revision 0009
    everything that inserts exchanges keeps the figure in the same transaction (this module
    and store.push; older forge-records refuse such a store) and every figure it writes has
    a new mark: a writer that extended ours after we committed changed the mark (an UPDATE
    that waited for its row lock sees that row, and matches nothing), and one that found ours
    invalid and left it could not have (ours was valid when written, and only inserts that
    keep it followed). gc forgets a figure (NULL) or keeps one with no mark. None if the
    mark is gone: the caller locks and counts. Counting too cost the server a scan of the
    session's index entries and heap pages every call (0.3 ms at 1,000 exchanges)."""
    figure = _figure(set(last["groups"]) | groups, last["exchanges"] + inserted)
    done = conn.execute(_EXTEND_OWN, {"sid": sid, "mark": last["mark"], "figure": figure,
                                      "beat": beat})
    return figure if done.rowcount == 1 else None


def _figure(groups: set[int], exchanges: int) -> dict:
    """A kept `pack_groups` figure as writers write it: marked as theirs (_extend_own)."""
    return {"groups": sorted(groups), "exchanges": exchanges, "mark": secrets.token_hex(8)}


def dialect_insert(conn: sa.Connection, table: sa.Table) -> Any:
    """The INSERT of the connection's dialect (for ON CONFLICT)."""
    return _dialect(conn.dialect.name).insert(table)


def _dialect(name: str) -> Any:
    """SQLAlchemy's module for the dialect `name`, imported only when used: importing
    Postgres' made every command on a SQLite store 29 ms slower to start."""
    return importlib.import_module(f"sqlalchemy.dialects.{name}")


def _add_session(conn: sa.Connection, item: AddSession, if_absent: bool) -> None:
    row = session_to_dict(item.session)
    row["user_name"] = row.pop("user")
    row.update(record_version=RECORD_VERSION, recorder_pid=item.recorder_pid,
               heartbeat_at=item.heartbeat_at)
    if if_absent:
        insert = dialect_insert(conn, sessions).on_conflict_do_nothing(index_elements=["id"])
        conn.execute(insert, row)
    else:
        conn.execute(sessions.insert(), row)


def _end_session(conn: sa.Connection, item: EndSession) -> None:
    values: dict[str, Any] = {"ended_at": item.ended_at, "exit_code": item.exit_code}
    if item.harness_version:
        values["harness_version"] = item.harness_version
    query = sessions.update().where(sessions.c.id == item.session_id).values(**values)
    if conn.execute(query).rowcount == 0:
        raise SessionNotFound(f"no session matches {item.session_id!r}")


_NEXT_SEQ = (gateway_sessions.update()
             .where(gateway_sessions.c.session_id == sa.bindparam("sid"))
             .values(calls=gateway_sessions.c.calls + 1)
             .returning(gateway_sessions.c.calls, gateway_sessions.c.status))


def next_seq(conn: sa.Connection, session_id: str) -> int:
    """The next number in a `serve` session's sequence (shared by every replica)."""
    return take_seq(conn, session_id)[0]


def take_seq(conn: sa.Connection, session_id: str) -> tuple[int, str]:
    """The session's next number, and its status as the same statement found it."""
    row = conn.execute(_NEXT_SEQ, {"sid": session_id}).first()
    if row is None:
        raise SessionNotFound(f"no gateway session {session_id!r} to number an exchange in")
    return row.calls, row.status


def note_named_by(conn: sa.Connection, session_id: str, how: str) -> None:
    """Record how a `serve` session's calls name it (the first way seen stays)."""
    conn.execute(gateway_sessions.update()
                 .where(gateway_sessions.c.session_id == session_id,
                        gateway_sessions.c.keyed_by.is_(None))
                 .values(keyed_by=how))


def _not_yet_stored(conn: sa.Connection, adds: list[AddExchange]) -> list[AddExchange]:
    numbered = [a for a in adds if a.numbered]
    fresh = set(map(id, _unnumbered_not_yet_stored(conn, [a for a in adds if not a.numbered])))
    fresh.update(map(id, _numbered_not_yet_stored(conn, numbered)))
    return [a for a in adds if id(a) in fresh]


def _unnumbered_not_yet_stored(conn: sa.Connection,
                               adds: list[AddExchange]) -> list[AddExchange]:
    """Those with no stored exchange of the same session, start time and URL (the URL is in
    the record only: the rows with that start time, nearly always none, are read)."""
    from forge_record.store.reader import read_one

    out, seen = [], set()
    for a in adds:
        key = (a.session_id, a.exchange.started_at, redact_url(a.exchange.url))
        if key in seen or any(
                getattr(read_one(conn, key[0], seq, raw=False), "url", None) == key[2]
                for seq in conn.scalars(sa.select(exchanges.c.seq).where(
                    exchanges.c.session_id == key[0], exchanges.c.started_at == key[1]))):
            continue
        seen.add(key)
        out.append(a)
    return out


def _numbered_not_yet_stored(conn: sa.Connection, adds: list[AddExchange]) -> list[AddExchange]:
    stored: set[tuple[str, int]] = set()
    for sid in {a.session_id for a in adds}:
        seqs = [a.exchange.seq for a in adds if a.session_id == sid]
        for part in chunks(seqs):
            stored.update((sid, s) for s in conn.scalars(sa.select(exchanges.c.seq).where(
                exchanges.c.session_id == sid, exchanges.c.seq.in_(part))))
    out, seen = [], set()
    for a in adds:  # a batch may hold the same exchange twice (a replay of a replay)
        key = (a.session_id, a.exchange.seq)
        if key not in stored and key not in seen:
            seen.add(key)
            out.append(a)
    return out


def cleaned(ex: Exchange) -> Exchange:
    """Secrets never reach the database, even if a caller forgot to drop them."""
    url = redact_url(ex.url)
    upstream = redact_url(ex.upstream_url) if ex.upstream_url is not None else None
    if url == ex.url and upstream == ex.upstream_url and not (
            _has_secrets(ex.request_headers) or _has_secrets(ex.response_headers)):
        return ex  # the recorder's exchanges: capture dropped them already
    return dataclasses.replace(
        ex,
        url=url,
        upstream_url=upstream,
        request_headers=_without_secrets(ex.request_headers),
        response_headers=_without_secrets(ex.response_headers),
    )


def _has_secrets(headers: dict[str, str]) -> bool:
    return any(k.lower() in SECRET_HEADERS for k in headers)


def _without_secrets(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in SECRET_HEADERS}


def _row(session_id: str, ex: Exchange, enc: Encoded) -> dict[str, Any]:
    response = ex.response or Response()
    return {
        "session_id": session_id,
        **{k: getattr(ex, k) for k in ("seq", "dialect", "kind", "started_at")},
        # What the agent asked for names the call even when no response came back.
        "model": (ex.request.model if ex.request else None) or response.model,
        **{c: getattr(response.usage, c) for c in TOKEN_COLUMNS},
        "tool_calls": sum(isinstance(b, ToolCall) for b in response.content),
        "record": enc.record,
        "raw_request": enc.raw_request,
        "raw_response": enc.raw_response,
        "raw_request_size": len(ex.raw_request),
        "raw_response_size": len(ex.raw_response),
        "layout": LAYOUT_CONTENT,
        "segment": enc.segment,
        "piece": enc.piece,
    }
