"""SessionEncoder: one session's exchanges, in the order they are written, as layout-2 rows.

No SQL and no I/O; store.store runs it inside the write transaction. The encoder carries one
*segment* of a session: two compressed streams (manifests, and packs of new blobs) and the
last few exchanges, which later ones derive from:

- Parent: among the RECENT exchanges written before it (with a smaller seq), and the last
  exchanges of up to HELD chains that fell out of those, the one whose message list shares
  the longest prefix with this request's. The manifest stores only
  "the parent's first k messages, then these". Agent loops append, so k is nearly all of it;
  a compaction that rewrote history gives a small k, and the messages it kept still resolve
  to blobs already stored. Messages are compared as records: `cache_control` markers are not
  part of them, so a moved marker does not break the chain.
- Raw parent: the same exchange, unless its raw chain is RAW_KEYFRAME_EVERY long (see
  store.delta).
- Dictionary: the pack stream starts from the harness version's dictionary when the store
  has one (store.dictionaries); until then the encoder's own pack group may become it.
- A segment ends when its streams have taken SEGMENT_BYTES of plain input, so that reading
  one exchange never decodes more than that; the next exchange starts a new segment with a
  fresh encoder and no parent.
- A segment *resumed* after its writer let the session's encoder go (store.batch keeps
  encoders within a memory budget, and `serve` writes more rollouts at once than it holds)
  starts with the last exchanges of the session's chains (its `tail`) among its recent
  ones: its exchanges may take their parent in an earlier segment, so their manifests and
  raw bodies still derive from it. Reading an exchange then decodes the manifests of the
  segments its parent chain reaches back through, at most REACH.
- The manifest stream starts from a dictionary shipped with the package
  (compression.MANIFESTS), for the first pieces of a stream, which have nothing earlier in
  it to refer to.

If a write fails, the store throws the encoder away: its streams already hold pieces that
were never committed. The next write starts a new segment, so nothing committed depends on
what was lost.
"""

from __future__ import annotations

import secrets
import time
from collections import deque
from dataclasses import InitVar, dataclass, field

import orjson

from forge_record.identity import blob_name
from forge_record.records import Exchange, Request
from forge_record.shared_ends import shared_prefix
from forge_record.store import compression, content, delta, dictionaries, tokens, wire

SEGMENT_BYTES = 4 << 20
RECENT = 8
# Chains whose last exchange fell out of the RECENT stay candidates, the latest HELD: Claude
# Code's main loop waits while a sub-agent makes its calls, often more than RECENT, and its
# next call had no parent (its whole message list, prompt and raw body stored again).
HELD = 4
# Segments one exchange's parent chain may span, and the chain heads a tail keeps. Written a
# segment a call (`serve` past the encoders' budget), the 150-call bench session of an
# unseen seed in a store with its harness's dictionary took 191 KB of payload, against 156
# KB written whole and 591 KB with no parent across segments; REACH 8 took 215 KB and 12
# 200, for at most 8 and 12 segments decoded to read one exchange (11-16 ms on SQLite either
# way, mean of every 7th). One head (the last exchange) took 6 KB more at REACH 8: a side
# call (a title, a sub-agent) between two calls of the main loop cut its chain; three, as
# two.
REACH = 16
HEADS = 2
PACK_IDLE = 600.0  # less than gc.GRACE


@dataclass
class Encoded:
    seq: int
    segment: int
    piece: int
    record: bytes  # the manifest's piece of the segment's manifest stream
    raw_request: bytes
    raw_response: bytes
    blobs: dict[str, bytes]  # the blobs it names that its parent does not
    shared: set[str]  # those of them other sessions may have stored too (see batch.py)
    # Those of them an earlier exchange of the segment named (the answer a request repeats):
    # their pack groups are in the session's kept groups already (store.batch.keep_groups).
    named: set[str]


@dataclass
class Seen:
    """What a later exchange may derive from: in its segment, or in one resumed after it."""

    seq: int
    request: Request | None
    names: list[str]  # its messages' blob names
    parts: dict[str, str | list]  # system, tools and parameters references
    raw_request: bytes
    raw_response: bytes
    raw_depth: int  # 0 for a keyframe
    tokens: list[int] | None = None  # engine prompt then output ids, what a child may keep
    tokens_depth: int = 0  # 0 for a call whose token blob keeps no parent ids
    segment: int = 0
    reach: int = 1  # segments its parent chain spans, its own included
    parent: int | None = None  # the seq it derives from

    @property
    def footprint(self) -> int:
        """About its memory: raw bodies, the parsed request counted as much again, and its
        token ids (an int object and a list slot each)."""
        return 2 * len(self.raw_request) + len(self.raw_response) + 36 * len(self.tokens or ())


@dataclass
class LastPack:
    """The pack row a stream wrote last, which its next pieces may still go into (on SQLite,
    store.batch.store_piece): its id, the plain bytes and the compressed bytes it holds."""

    id: int
    size: int
    data: bytes


@dataclass
class Written:
    """What a writer put in one pack group, for sealing it once it is finished (store.seal):
    the plain bytes it fed the group, and the blob rows it made there, as (name, offset in
    the group's plain bytes)."""

    group: int
    dictionary: tuple[int, bytes] | None = None  # (id, plain bytes) the group starts from
    fed: int = 0
    made: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class FinishedSegment:
    """A segment no writer will add to, for sealing its manifests and raw responses
    (store.seal): the pieces its writer wrote, all of them committed."""

    session_id: str
    segment: int
    pieces: int


@dataclass
class PackStream:
    """A pack group being written: each pack is the next piece of one zstd stream, which
    starts from the harness version's dictionary if there is one. A segment writes its own;
    resumed segments share their writer's (store.batch), so a session resumed call after
    call does not add a pack group a call. After PACK_IDLE seconds without a pack the
    stream starts over as a new group: gc may by then have removed a group none of whose
    blobs were kept (it spares groups younger than its grace)."""

    dictionary: tuple[int, bytes] | None = None  # (id, plain bytes)
    _stream: compression.Stream = field(init=False)
    _packed_at: float = field(default_factory=time.monotonic)
    last: LastPack | None = None  # in this group; kept by store.batch.store_piece
    written: Written = field(init=False)  # its group; the rows made there kept by store_piece
    idled: list[Written] = field(default_factory=list)  # groups it left after PACK_IDLE

    def __post_init__(self) -> None:
        self._stream, self.written = self._new(), self._group()

    def _new(self) -> compression.Stream:
        return compression.Stream(prefix=self.dictionary[1] if self.dictionary else b"")

    def _group(self) -> Written:
        return Written(secrets.randbits(62), self.dictionary)

    @property
    def group(self) -> int:
        return self.written.group

    @property
    def fed(self) -> int:
        return self.written.fed

    @property
    def held(self) -> int:
        return self._stream.held + self._stream.fed

    def pack(self, datas: list[bytes]) -> tuple[bytes, list[tuple[int, int]]]:
        """The next piece of the stream, holding `datas` one after another; with each one's
        (start, length) in the piece's plain bytes."""
        now = time.monotonic()
        if now - self._packed_at > PACK_IDLE:
            self.idled.append(self.written)
            self._stream, self.written, self.last = self._new(), self._group(), None
        self._packed_at = now
        piece = self._stream.piece(b"".join(datas))
        self.written.fed = self._stream.fed
        return piece, spans(datas)


@dataclass
class SessionEncoder:
    segment: int
    harness: str = ""  # dictionaries.key of the segment's first exchange
    dictionary: tuple[int, bytes] | None = None  # (id, plain bytes) its pack streams start from
    pieces: int = 0
    packs: PackStream | None = None  # None: a stream of its own; else its writer's shared one
    _manifests: compression.Stream = field(default_factory=lambda: compression.Stream(
        table_log=compression.MANIFEST_TABLE_LOG, trained=compression.MANIFESTS))
    _own_packs: bool = field(init=False, default=True)  # whether `packs` is its own stream
    _offered: bool = False  # its group as the harness version's dictionary
    _recent: deque[Seen] = field(default_factory=lambda: deque(maxlen=RECENT))
    _held: deque[Seen] = field(default_factory=lambda: deque(maxlen=HELD))  # see HELD
    _bytes: dict[str, bytes] = field(default_factory=dict)  # blobs named in this segment
    _bytes_held: int = 0  # their sizes, summed
    _first_named: set[str] = field(default_factory=set)  # those the exchange being encoded adds
    resumes: InitVar[list[Seen]] = ()  # the tail of the session's previous segment

    def __post_init__(self, resumes: list[Seen]) -> None:
        self._own_packs = self.packs is None
        if self.packs is None:
            self.packs = PackStream(self.dictionary)
        self._recent.extend(resumes)

    @property
    def group(self) -> int:
        """The pack group its next pack goes into."""
        return self.packs.group

    @property
    def tail(self) -> list[Seen]:
        """What a later segment may resume from once this encoder is let go: the heads of
        its recent chains (exchanges no later one went on from), but for those whose chain
        spans REACH segments already or whose raw chain is due a keyframe (which would need
        the bytes of every blob they name)."""
        taken = {s.parent for s in self._recent}
        heads = [s for s in self._seen if s.seq not in taken and s.request is not None
                 and s.reach < REACH and s.raw_depth + 1 < delta.RAW_KEYFRAME_EVERY]
        return heads[-HEADS:]

    @property
    def dictionary_id(self) -> int | None:
        return self.dictionary[0] if self.dictionary else None

    def offer_dictionary(self, ended: bool = False) -> tuple[int, int] | None:
        """(group, plain bytes) of its pack group to make its harness version's dictionary:
        once the group holds dictionaries.SIZE bytes, or at the session's end (`ended`) if
        it holds MAKE_AFTER; then only once. None if it uses a dictionary itself (groups
        never chain), shares its writer's stream, or has too little."""
        fed = self.packs.fed
        if self.dictionary or not self._own_packs or self._offered or fed < (
                dictionaries.MAKE_AFTER if ended else dictionaries.SIZE):
            return None
        self._offered = True
        return self.group, min(fed, dictionaries.SIZE)

    @property
    def full(self) -> bool:
        return self._manifests.fed + (self.packs.fed if self._own_packs else 0) >= SEGMENT_BYTES

    def encode(self, ex: Exchange) -> Encoded:
        parent, keep = self._parent(ex)
        self._first_named.clear()
        blobs: dict[str, bytes] = {}
        refs, names, parts = None, [], {}
        if ex.request is not None:
            parts = self._parts(ex.request, parent, blobs)
            append = [self._keep(content.message_blob(m), blobs)
                      for m in ex.request.messages[keep:]]
            names = (parent.names[:keep] if parent else []) + append
            refs = content.request_refs(ex.request, parts, parent and parent.seq, keep, append)
        answer = self._keep(content.answer_blob(ex.response), blobs) if ex.response else None
        token_ref, token_depth = self._tokens(ex, parent, blobs)
        raw_parent = parent if parent and parent.raw_depth + 1 < delta.RAW_KEYFRAME_EVERY else None
        mark = wire.mark(ex.dialect)
        hint = self._request_hint(ex.request, refs, names, raw_parent is None, mark)
        raw_request = delta.encode(ex.raw_request, raw_parent.raw_request if raw_parent else None,
                                   hint, mark=mark)
        found = orjson.dumps(content.manifest(
            ex, refs, answer, raw_parent and raw_parent.seq, token_ref))
        raw_response = delta.encode_response(ex.raw_response, response_hint(
            raw_parent.raw_response if raw_parent else b"", self._bytes.get(answer, b"")), found)
        piece = self._manifests.piece(found)
        self._hold(parent)
        self._recent.append(Seen(
            ex.seq, ex.request, names, parts, ex.raw_request, ex.raw_response,
            raw_parent.raw_depth + 1 if raw_parent else 0,
            tokens.full(ex.response and ex.response.tokens), token_depth, segment=self.segment,
            reach=parent.reach + (parent.segment != self.segment) if parent else 1,
            parent=parent.seq if parent else None))
        self.pieces += 1
        # Only messages appended to this session's own history are certainly new, and a
        # call's token blob is its own.
        mine = {answer, token_ref and token_ref["blob"]}
        shared = set(blobs) - set(refs["append"] if refs and parent else ()) - mine
        return Encoded(ex.seq, self.segment, self.pieces - 1, piece, raw_request, raw_response,
                       blobs, shared, set(blobs) - self._first_named)

    def pack(self, datas: list[bytes]) -> tuple[bytes, list[tuple[int, int]]]:
        """The next piece of its pack stream (PackStream.pack)."""
        return self.packs.pack(datas)

    @property
    def finished(self) -> list[Written]:
        """The pack group it is done with once let go: its own stream's (a shared stream
        goes on; groups left idle were taken as the stream left them, store.batch)."""
        return [self.packs.written] if self._own_packs else []

    @property
    def _seen(self) -> list[Seen]:
        """The exchanges a later one may derive from, oldest first."""
        return [*self._held, *self._recent]

    def _hold(self, parent: Seen | None) -> None:
        """Before the next exchange is added (continuing `parent`): a held chain it goes on
        is no longer held, and the exchange about to fall out of the RECENT is held if no
        exchange went on from it."""
        if parent in self._held:
            self._held.remove(parent)
        if len(self._recent) == RECENT:
            oldest = self._recent[0]
            if oldest is not parent and oldest.request is not None and \
                    all(s.parent != oldest.seq for s in self._recent):
                self._held.append(oldest)

    def _parent(self, ex: Exchange) -> tuple[Seen | None, int]:
        if ex.request is None or not ex.request.messages:
            return None, 0
        best, keep = None, 0
        # Longest lists first: once a candidate is no longer than the best shared prefix,
        # no later one can beat it, and the full comparison is skipped.
        for seen in sorted(self._seen, key=lambda s: (len(s.names), s.seq), reverse=True):
            if len(seen.names) <= keep:
                break
            if seen.seq < ex.seq and seen.request is not None:
                k = shared_prefix(seen.request.messages, ex.request.messages)
                if k > keep:
                    best, keep = seen, k
        return best, keep

    def _tokens(self, ex: Exchange, parent: Seen | None,
                blobs: dict[str, bytes]) -> tuple[dict | None, int]:
        """The manifest's reference to the call's token blob, and its depth in its chain:
        prompt ids are kept as what they add to the message parent's ids (store.tokens)."""
        if ex.response is None or ex.response.tokens is None:
            return None, 0
        base = parent if parent and parent.tokens and \
            parent.tokens_depth + 1 < tokens.KEYFRAME_EVERY else None
        data, keep = tokens.encode(ex.response.tokens, base and base.tokens)
        ref = {"blob": self._keep(data, blobs), "parent": base.seq if base and keep else None}
        return ref, base.tokens_depth + 1 if base and keep else 0

    def _parts(self, request: Request, parent: Seen | None, blobs: dict[str, bytes]) -> dict:
        """The manifest's references to the request's system prompt, tools and parameters:
        the parent's where they are the parent's, else content.system_ref, a tools blob and
        content.parameters_ref (which compares parameters itself, as written: in Python
        1 == 1.0 == True)."""
        def keep(data: bytes) -> str:
            return self._keep(data, blobs)

        before = parent.request if parent else None
        return {
            "system": parent.parts["system"] if before and before.system == request.system
            else content.system_ref(request, before, keep),
            "tools": parent.parts["tools"] if before and before.tools == request.tools
            else keep(content.tools_blob(request.tools)),
            "parameters": content.parameters_ref(
                request.parameters, before and before.parameters,
                parent and parent.parts["parameters"], keep, fresh=self.pieces == 0),
        }

    def _keep(self, data: bytes, blobs: dict[str, bytes]) -> str:
        blob = blob_name(data)
        if blob not in self._bytes:
            self._bytes_held += len(data)
            self._first_named.add(blob)
        blobs[blob] = self._bytes[blob] = data
        return blob

    @property
    def footprint(self) -> int:
        """About the memory this encoder holds, in bytes: its two streams (match tables and
        the window they have filled), the blobs it named, and the exchanges a later one may
        derive from (raw bodies, and their parsed requests counted as much again). Checked
        against RSS: 149 encoders of tests' realistic sessions, 3 calls each, estimated 256 MB,
        282 MB."""
        return (self._manifests.held + self._manifests.fed
                + (self.packs.held if self._own_packs else 0) + self._bytes_held
                + sum(s.footprint for s in self._seen))

    def _request_hint(self, request: Request | None, refs: dict | None, names: list[str],
                      keyframe: bool, mark: bytes) -> bytes:
        if refs is None:
            return b""
        if keyframe:
            # A resumed segment's encoder never held what it keeps from its tail; equal
            # records make equal blobs, so those are made again from the request (the whole
            # system prompt and parameters always: they may be named in parts).
            parts = [content.system_blob(request),
                     self._bytes.get(refs["tools"]) or content.tools_blob(request.tools),
                     content.parameters_blob(request.parameters)]
            messages = [self._bytes.get(n) or content.message_blob(m)
                        for n, m in zip(names, request.messages, strict=True)]
            return request_hint(parts, messages, mark)
        return request_hint([], [self._bytes[n] for n in refs["append"]], mark)


def spans(datas: list[bytes]) -> list[tuple[int, int]]:
    """(start, length) of each of `datas` in their concatenation."""
    out, at = [], 0
    for data in datas:
        out.append((at, len(data)))
        at += len(data)
    return out


def request_hint(parts: list[bytes], messages: list[bytes], mark: bytes = b"") -> bytes:
    """What a raw request is compressed against besides its parent: a keyframe's every blob
    (system, tools, parameters, messages), a delta's appended messages; with a rendering's
    `mark`, in that dialect's wire form (store.wire)."""
    if mark:
        return wire.render(mark, parts, messages)
    return b"".join(parts) + b"".join(messages)


def response_hint(parent_response: bytes, answer: bytes) -> bytes:
    return parent_response + answer
