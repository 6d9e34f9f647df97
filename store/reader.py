"""Reading exchanges back: a whole session in order, or one exchange at random.

Contract: every exchange reads back equal to the one written (records, and raw bodies byte
for byte when asked for). Work is bounded per exchange: one exchange decodes the manifest
pieces of its segment up to it (at most encoder.SEGMENT_BYTES of plain input) and of the
earlier segments its parents are in (a resumed segment's: at most segments.REACH), the pack
groups holding its blobs, and at most delta.RAW_KEYFRAME_EVERY raw frames when raw bodies
are asked for. Reading a session decodes each of those once, and each blob into its record
once: the exchanges of one read share the messages, blocks, tools and parameters they repeat
(content.Decoded), so callers must not change those in place. Every blob is checked against
its name on the way out; a mismatch or a missing row is a StoreError, never a wrong record.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
import sqlalchemy as sa

from forge_record.errors import StoreError
from forge_record.identity import blob_name
from forge_record.records import Exchange, Tokens, exchange_from_dict
from forge_record.store import (
    compression,
    content,
    delta,
    dictionaries,
    sealed,
    strands,
    tokens,
)
from forge_record.store.schema import LAYOUT_RECORD, blobs, exchanges, packs
from forge_record.store.segments import request_hint, response_hint

_CHUNK = 500  # names per IN (...) list
_RAW_CACHE = 16
_LOOKS = 3  # times a blob is looked up while its pack keeps moving (BlobReader._load)

# Every statement is built once, with bound parameters: working out a statement's shape for
# SQLAlchemy's compiled cache costs more than SQLite takes to run it (0.4 ms against 0.25 ms
# a query), and reading a short session runs several.
_SESSION = sa.bindparam("session_id")
_BLOB_PLACES = sa.select(blobs.c.hash, blobs.c.pack_id, blobs.c.start, blobs.c.length).where(
    blobs.c.hash.in_(sa.bindparam("names", expanding=True)))
_PACK_GROUPS = sa.select(packs.c.group_id, sa.func.max(packs.c.id)).where(
    packs.c.id.in_(sa.bindparam("ids", expanding=True))).group_by(packs.c.group_id)
_GROUP_PACKS = sa.select(packs.c.id, packs.c.data, packs.c.dictionary_id).where(
    packs.c.group_id == sa.bindparam("group"), packs.c.id <= sa.bindparam("last")
).order_by(packs.c.id)
_GROUP_PACKS_0002 = sa.select(packs.c.id, packs.c.data).where(
    packs.c.group_id == sa.bindparam("group"), packs.c.id <= sa.bindparam("last")
).order_by(packs.c.id)
_SEGMENTS = sa.select(exchanges.c.segment).distinct().where(
    exchanges.c.session_id == _SESSION, exchanges.c.layout != LAYOUT_RECORD)
_MANIFESTS = sa.select(exchanges.c.seq, exchanges.c.piece, exchanges.c.record).where(
    exchanges.c.session_id == _SESSION, exchanges.c.segment == sa.bindparam("segment")
).order_by(exchanges.c.piece)
_MANIFESTS_UPTO = _MANIFESTS.where(exchanges.c.piece <= sa.bindparam("upto"))
_SEGMENT_RESPONSES = sa.select(exchanges.c.seq, exchanges.c.raw_response).where(
    exchanges.c.session_id == _SESSION, exchanges.c.segment == sa.bindparam("segment")
).order_by(exchanges.c.piece)
_RAW_FRAMES = sa.select(exchanges.c.seq, exchanges.c.raw_request, exchanges.c.raw_response).where(
    exchanges.c.session_id == _SESSION, exchanges.c.seq.in_(sa.bindparam("seqs", expanding=True)))
_ROWS = sa.select(exchanges.c.seq, exchanges.c.layout, exchanges.c.record).where(
    exchanges.c.session_id == _SESSION).order_by(exchanges.c.seq).execution_options(yield_per=64)
_PLACE = sa.select(exchanges.c.segment, exchanges.c.piece).where(
    exchanges.c.session_id == _SESSION, exchanges.c.seq == sa.bindparam("seq"))
_RAW_ROWS = _ROWS.add_columns(exchanges.c.raw_request, exchanges.c.raw_response)
_ONE_ROW = sa.select(exchanges.c.layout, exchanges.c.segment, exchanges.c.piece,
                     exchanges.c.record, exchanges.c.raw_request, exchanges.c.raw_response).where(
    exchanges.c.session_id == _SESSION, exchanges.c.seq == sa.bindparam("seq"))


def chunks(items: list, size: int = _CHUNK) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class BlobReader:
    """Blob bytes by name; each pack group is decoded at most once per reader (again only
    if a later pack of it is needed). Without `dictionaries`, it reads a store below
    revision 0005, whose packs have no dictionary_id (a migration's downgrade)."""

    def __init__(self, conn: sa.Connection, dictionaries: bool = True) -> None:
        self._conn = conn
        self._group_packs = _GROUP_PACKS if dictionaries else _GROUP_PACKS_0002
        self._plain: dict[str, bytes] = {}
        self._packs: dict[int, bytes] = {}  # pack id -> plain bytes
        self._dictionaries: dict[int, bytes] = {}  # id -> plain bytes

    def get(self, blob: str) -> bytes:
        if blob not in self._plain:
            self.load([blob])
        return self._plain[blob]

    def load(self, names: Iterable[str]) -> None:
        wanted = sorted({n for n in names if n not in self._plain})
        for part in chunks(wanted):
            for _ in range(_LOOKS):
                part = self._load(part)
                if not part:
                    break
        missing = [n for n in wanted if n not in self._plain]
        if missing:
            raise StoreError(f"{len(missing)} blobs are missing, e.g. {missing[0]}")

    def _load(self, names: list[str]) -> list[str]:
        """Load these blobs; returns those whose pack was gone when it was read: a seal
        (store.seal) or gc's repack moved them meanwhile, so they are looked up again."""
        # Rows unpacked as tuples: a Row's attributes cost about a microsecond each.
        places = [tuple(r) for r in self._conn.execute(_BLOB_PLACES, {"names": names})]
        self._decode_packs({pack for _, pack, _, _ in places})
        moved = []
        for blob, pack, start, length in places:
            if pack not in self._packs:
                moved.append(blob)
                continue
            data = self._packs[pack][start : start + length]
            if blob_name(data) != blob:
                raise StoreError(f"blob {blob} does not match its bytes: the store is damaged")
            self._plain[blob] = data
        return moved

    def _decode_packs(self, ids: set[int]) -> None:
        ids -= self._packs.keys()
        if not ids:
            return
        groups = self._conn.execute(_PACK_GROUPS, {"ids": sorted(ids)}).all()
        for group, last in groups:
            rows = self._conn.execute(self._group_packs, {"group": group, "last": last}).all()
            if not rows:  # gone since (sealed, or repacked by gc): _load looks again
                continue
            used = rows[0].dictionary_id if self._group_packs is _GROUP_PACKS else None
            plains = compression.decode_pieces((r.data for r in rows), self._dictionary(used))
            self._packs.update((r.id, p) for r, p in zip(rows, plains, strict=True))


    def _dictionary(self, dictionary_id: int | None) -> bytes:
        if dictionary_id is None:
            return b""
        if dictionary_id not in self._dictionaries:
            self._dictionaries[dictionary_id] = dictionaries.plain(self._conn, dictionary_id)
        return self._dictionaries[dictionary_id]


def segment_manifests(
    conn: sa.Connection, session_id: str, segment: int, upto: int | None = None
) -> dict[int, dict[str, Any]]:
    """seq -> manifest for the segment's pieces (up to piece `upto`)."""
    pieces = segment_pieces(conn, session_id, segment, upto)
    return {seq: orjson.loads(p) for seq, p in pieces.items()}


def segment_pieces(
    conn: sa.Connection, session_id: str, segment: int, upto: int | None = None
) -> dict[int, bytes]:
    """seq -> the plain bytes of its manifest (raw responses are compressed against them)."""
    where = {"session_id": session_id, "segment": segment}
    if upto is None:
        rows = conn.execute(_MANIFESTS, where).all()
    else:
        rows = conn.execute(_MANIFESTS_UPTO, {**where, "upto": upto}).all()
    if [r.piece for r in rows] != list(range(len(rows))):
        raise StoreError(f"session {session_id} segment {segment} has missing pieces")
    plains = sealed.manifest_plains([r.record for r in rows])
    return {r.seq: p for r, p in zip(rows, plains, strict=True)}


def legacy(record: bytes, raw_request: bytes = b"", raw_response: bytes = b"") -> Exchange:
    """A layout-1 row (revision 0001)."""
    return exchange_from_dict(compression.unpack(record), compression.decompress(raw_request),
                              compression.decompress(raw_response))


class SessionReader:
    """Rebuilds the layout-2 exchanges of one session."""

    def __init__(self, conn: sa.Connection, session_id: str, dictionaries: bool = True) -> None:
        self.conn, self.session_id = conn, session_id
        self.blobs = BlobReader(conn, dictionaries)
        self.decoded = content.Decoded(self.blobs.get)  # shared by the exchanges it rebuilds
        self.manifests: dict[int, dict[str, Any]] = {}
        self.pieces: dict[int, bytes] = {}  # seq -> its manifest's plain bytes
        self._lists: dict[int, dict[int, list[str]]] = {}  # segment -> seq -> message names
        self._segment_of: dict[int, int] = {}
        self._raw: OrderedDict[int, tuple[bytes, bytes]] = OrderedDict()
        self._responses: OrderedDict[int, bytes] = OrderedDict()
        self._sealed: dict[int, dict[int, bytes] | None] = {}  # segment -> seq -> raw response
        self._frames_of: dict[int, tuple[bytes, bytes]] = {}  # prefetched raw frames
        self._tokens: OrderedDict[int, Tokens | None] = OrderedDict()

    def add_segment(self, segment: int, upto: int | None = None, preload: bool = True) -> None:
        """Decode a segment's manifests (up to piece `upto`); with `preload`, fetch every blob
        they name in one go (what reading a whole session needs)."""
        pieces = segment_pieces(self.conn, self.session_id, segment, upto)
        self.pieces.update(pieces)
        found = {seq: orjson.loads(p) for seq, p in pieces.items()}
        self.manifests.update(found)
        self._segment_of.update(dict.fromkeys(found, segment))
        self._lists.setdefault(segment, {})
        if preload:
            self.blobs.load(n for m in found.values() for n in content.referenced(m))

    def add_parents(self, seq: int) -> None:
        """Decode, up to each one, the manifests of the earlier segments `seq`'s parent chain
        is in: a resumed segment goes on from its session's tail (store.segments)."""
        at: int | None = seq
        while (at := content.parent(self.manifests[at])) is not None:
            if at not in self.manifests:
                row = self.conn.execute(_PLACE, {"session_id": self.session_id, "seq": at}).first()
                if row is None:
                    raise StoreError(f"session {self.session_id} has no exchange {at}, "
                                     "which a later one derives from")
                self.add_segment(row.segment, upto=row.piece, preload=False)

    def prefetch(self, seq: int, raw: bool) -> None:
        """Fetch, in one query each, the blobs and raw frames one exchange needs."""
        chain = self._raw_chain(seq) if raw else [seq]
        names: set[str] = set()
        for s in chain:
            found = self.manifests[s]
            names.update(content.referenced(found))
            if found["request"] is not None and (s == seq or found["raw_parent"] is None):
                names.update(self.names(s))  # the record, or a keyframe's hint
        names.update(self._token_chain(seq))
        self.blobs.load(names)
        if raw:
            where = {"session_id": self.session_id, "seqs": chain}
            for row in self.conn.execute(_RAW_FRAMES, where):
                self._frames_of[row.seq] = (row.raw_request, row.raw_response)

    def _raw_chain(self, seq: int) -> list[int]:
        chain = [seq]
        while (parent := self.manifests[chain[-1]]["raw_parent"]) is not None:
            chain.append(parent)
        return chain

    def exchange(self, seq: int, raw: bool, frames: tuple[bytes, bytes] | None = None) -> Exchange:
        found = self.manifests[seq]
        names = self.names(seq)
        bodies = self.raw(seq, frames) if raw else (b"", b"")
        return content.rebuild(found, names, self.decoded, *bodies, tokens=self.tokens(seq))

    def tokens(self, seq: int) -> Tokens | None:
        """The engine tokens of `seq` whose manifest names a token blob, decoding its token
        parents first (cached); None otherwise."""
        if seq in self._tokens:
            self._tokens.move_to_end(seq)
            return self._tokens[seq]
        ref = content.token_ref(self.manifests[seq]["response"])
        found = None
        if ref is not None:
            base = tokens.full(self.tokens(ref["parent"])) if ref["parent"] is not None else None
            found = tokens.decode(self.blobs.get(ref["blob"]), base)
        self._tokens[seq] = found
        if len(self._tokens) > _RAW_CACHE:
            self._tokens.popitem(last=False)
        return found

    def _token_chain(self, seq: int) -> list[str]:
        """The token blobs rebuilding `seq`'s tokens reads (at most tokens.KEYFRAME_EVERY)."""
        out, at = [], seq
        while at is not None and (ref := content.token_ref(self.manifests[at]["response"])):
            out.append(ref["blob"])
            at = ref["parent"]
        return out

    def names(self, seq: int) -> list[str]:
        segment = self._segment_of[seq]
        return content.message_names(self.manifests, seq, self._lists[segment])

    def raw(self, seq: int, frames: tuple[bytes, bytes] | None = None) -> tuple[bytes, bytes]:
        """The raw bodies of `seq`, decoding its raw parents first (cached)."""
        if seq in self._raw:
            self._raw.move_to_end(seq)
            return self._raw[seq]
        found = self.manifests[seq]
        parent = found["raw_parent"]
        parent_request = self.raw(parent)[0] if parent is not None else None
        request_frame, response_frame = (
            frames or self._frames_of.pop(seq, None) or self._frames(seq))
        bodies = (
            delta.decode(request_frame, parent_request, self._request_hint(
                seq, parent is None, delta.mark(request_frame))),
            self.response(seq, response_frame),
        )
        self._raw[seq] = bodies
        if len(self._raw) > _RAW_CACHE:
            self._raw.popitem(last=False)
        return bodies

    def response(self, seq: int, frame: bytes | None = None) -> bytes:
        """The raw response of `seq` (its row's frame, if the caller has it), decoding its raw
        parents' first (cached)."""
        if seq in self._responses:
            self._responses.move_to_end(seq)
            return self._responses[seq]
        self.response_cut(seq, frame)
        return self._responses[seq]

    def response_cut(self, seq: int, frame: bytes | None = None) -> strands.Cut:
        """What response() joins (delta.response_cut), keeping the body for its children's
        frames. In a sealed segment (store.sealed) the first row holds every response and
        the others none: looked up by the frame, so that a reader that decoded the segment's
        manifests before the seal and read frames after it reads right."""
        if frame is None:
            frame = self._frames_of[seq][1] if seq in self._frames_of else self._frames(seq)[1]
        body = self._sealed_response(seq) if not frame or sealed.is_sealed(frame) else None
        if body is not None:
            cut = strands.WHOLE, body, [], b""
        else:
            found = self.manifests[seq]
            parent = found["raw_parent"]
            cut = delta.response_cut(frame, response_hint(
                self.response(parent) if parent is not None else b"", self._answer(found)),
                self.pieces[seq])
            body = strands.join(*cut)
        self._responses[seq] = body
        if len(self._responses) > _RAW_CACHE:
            self._responses.popitem(last=False)
        return cut

    def _sealed_response(self, seq: int) -> bytes | None:
        segment = self._segment_of[seq]
        if segment not in self._sealed:
            self._sealed[segment] = self._unseal(segment)
        found = self._sealed[segment]
        return None if found is None else found[seq]

    def _unseal(self, segment: int) -> dict[int, bytes] | None:
        """seq -> raw response of a sealed segment; None if it is not sealed. Its frame is
        compressed against every manifest and answer of the segment: those read up to one
        piece (read_one) are read again whole."""
        rows = self.conn.execute(
            _SEGMENT_RESPONSES, {"session_id": self.session_id, "segment": segment}).all()
        if not rows or not sealed.is_sealed(rows[0].raw_response):
            return None
        if any(r.seq not in self.pieces for r in rows):
            self.add_segment(segment, preload=False)
        self.blobs.load(name for r in rows if (name := self.answer_name(r.seq)))
        bodies = sealed.unseal_responses(rows[0].raw_response,  # as many as manifests, or raises
                                         [self.pieces[r.seq] for r in rows],
                                         [self.answer(r.seq) for r in rows])
        return {r.seq: body for r, body in zip(rows, bodies, strict=True)}

    def _frames(self, seq: int) -> tuple[bytes, bytes]:
        where = {"session_id": self.session_id, "seqs": [seq]}
        row = self.conn.execute(_RAW_FRAMES, where).one()
        return row.raw_request, row.raw_response

    def _request_hint(self, seq: int, keyframe: bool, mark: bytes) -> bytes:
        refs = self.manifests[seq]["request"]
        if refs is None:
            return b""
        if keyframe:
            parts = [content.system_bytes(refs["system"], self.blobs.get),
                     self.blobs.get(refs["tools"]),
                     content.parameters_bytes(refs["parameters"], self.blobs.get)]
            return request_hint(parts, [self.blobs.get(n) for n in self.names(seq)], mark)
        return request_hint([], [self.blobs.get(n) for n in refs["append"]], mark)

    def answer(self, seq: int) -> bytes:
        """The bytes of `seq`'s answer blob (b"" for none): part of what its raw response is
        compressed against."""
        return self._answer(self.manifests[seq])

    def answer_name(self, seq: int) -> str | None:
        return _answer_name(self.manifests[seq])

    def _answer(self, found: dict[str, Any]) -> bytes:
        name = _answer_name(found)
        return self.blobs.get(name) if name else b""


def _answer_name(found: dict[str, Any]) -> str | None:
    """The blob a manifest names for its response's content (None: no response)."""
    response = found["response"]
    return response["content"] if response else None


def read_session(conn: sa.Connection, session_id: str, raw: bool,
                 dictionaries: bool = True) -> Iterator[Exchange]:
    """Every exchange of the session in seq order, streamed (`dictionaries`: see
    BlobReader)."""
    reader = SessionReader(conn, session_id, dictionaries)
    # The rows first, then their segments: a writer committing meanwhile (another replica of
    # `serve`, or this process's writer) only adds segments and manifests the rows do not
    # name, never takes away one they do, whatever each statement's snapshot.
    rows = conn.execute(_RAW_ROWS if raw else _ROWS, {"session_id": session_id})
    for segment in sorted(conn.scalars(_SEGMENTS, {"session_id": session_id})):
        reader.add_segment(segment)
    for row in rows:
        frames = (row.raw_request, row.raw_response) if raw else None
        if row.layout == LAYOUT_RECORD:
            yield legacy(row.record, *frames) if raw else legacy(row.record)
        else:
            yield reader.exchange(row.seq, raw, frames)


def read_one(conn: sa.Connection, session_id: str, seq: int, raw: bool) -> Exchange | None:
    """One exchange, decoding only what it depends on; None if there is no such exchange."""
    row = conn.execute(_ONE_ROW, {"session_id": session_id, "seq": seq}).first()
    if row is None:
        return None
    if row.layout == LAYOUT_RECORD:
        return legacy(row.record, row.raw_request, row.raw_response) if raw else legacy(row.record)
    reader = SessionReader(conn, session_id)
    reader.add_segment(row.segment, upto=row.piece, preload=False)
    reader.add_parents(seq)
    reader.prefetch(seq, raw)
    return reader.exchange(seq, raw, (row.raw_request, row.raw_response))
