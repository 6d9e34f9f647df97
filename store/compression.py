"""Bytes in the store: zstd frames, frames compressed against a prefix, and streams of pieces.

The only module that imports zstandard. Three shapes:

- compress(data) / pack(obj): one standalone frame (orjson first for pack). Layout-1 rows and
  small standalone values use these.
- compress_with(data, prefix): one frame that may refer back into `prefix` (zstd's raw-content
  dictionary). Decoding needs the very same prefix bytes, so callers build prefixes only from
  bytes the store keeps (blob bytes, earlier bodies), never from re-serialized objects.
- Stream: one zstd frame cut into pieces, one piece per call, each flushed so that it decodes
  as soon as the pieces before it have been fed. A later piece refers back into everything
  earlier in the stream, which is what makes per-exchange pieces small. decode_pieces()
  decodes a run of pieces that starts at the stream's first piece. A stream may start from
  a prefix (raw bytes the caller keeps) or from one of the TRAINED dictionaries shipped
  with this package, which its frame names by id. seal(plain, prefix) is what a stream
  becomes once finished: the same bytes as one frame, harder compressed, that decodes as
  its pieces did.

zstandard's compressor and decompressor objects are not thread-safe, so each thread keeps its
own one-shot pair (the writer thread compresses while a CLI thread may be reading); a Stream
is owned by whoever made it. Empty input stays empty: an empty frame would still cost ~9 bytes.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import zstandard

from forge_record.errors import StoreError

LEVEL = 3  # zstd's own default: fast enough for the writer thread, ~4-10x on JSON bodies
# Streams (manifests, packs) compress a few KB per piece. Level 9 against 3 (issue 21,
# bench/storage.py, 150-call sessions): packs 139.0 -> 129.7 KB and manifests 24.6 -> 22.9 KB
# for one session, 296.6 -> 287.1 KB a session in a 20-session Postgres store, for ~0.2 ms
# more store CPU a call at 200 KB contexts (bench/writer_session.py --calls 1000
# --compact-kb 360: 0.91 -> 1.11 ms). Level 12 saved 1.2 KB a session more for another
# 0.13 ms; 6 was ~5% smaller than 3.
STREAM_LEVEL = 9
STREAM_WINDOW_LOG = 22  # 4 MiB: a segment's pieces (store.segments.SEGMENT_BYTES) all stay in reach
# Level 9's own match tables (2^21 hash and 2^20 chain entries) are sized for inputs far
# bigger than a segment: they made every new stream cost ~10 MB and ~1.5-5 ms to set up, and
# a writer keeps two streams per session it writes (`serve`: hundreds of rollouts at once).
# Pack streams take 2^17 entries (~1 MB, the same strategy; on disk +1% against 2^21);
# manifest streams, ~2 KB of plain bytes a call, take 2^14.
STREAM_TABLE_LOG = 17
MANIFEST_TABLE_LOG = 14
STREAM_BUFFERS = 300 << 10  # a compressor's block and sequence buffers (measured as RSS)
# Zstd dictionaries shipped with the package, by the id their frames carry. Manifest streams
# start from MANIFESTS (bench/manifest_dictionary.py): a stream's first pieces have nothing
# earlier to refer to, and `serve` starts a stream for every rollout, and for every call of
# a rollout whose encoder its writer let go; from the dictionary such a piece takes about a
# quarter of the bytes. A file's bytes never change once shipped (stores hold frames made
# with it): a better dictionary is a new file with a new id, and the old one stays here.
MANIFESTS = 0x46520001
TRAINED = {MANIFESTS: "manifests-1.dict"}


def stream_tables(table_log: int) -> int:
    """Bytes a stream's compressor holds before its window fills: match tables (hash and
    chain, 4 bytes an entry) and buffers."""
    return (2 * 4 << table_log) + STREAM_BUFFERS


_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    c = getattr(_local, "compressor", None)
    if c is None:
        c = _local.compressor = zstandard.ZstdCompressor(level=LEVEL)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "decompressor", None)
    if d is None:
        d = _local.decompressor = zstandard.ZstdDecompressor()
    return d


def compress(data: bytes) -> bytes:
    """One zstd frame holding `data` (its size is written into the frame header)."""
    return _compressor().compress(data) if data else b""


def decompress(data: bytes) -> bytes:
    """The inverse of compress()."""
    return _decompressor().decompress(data) if data else b""


def pack(obj: Any) -> bytes:
    """orjson, then zstd. `obj` must be JSON-ready (records' to_dict() output is)."""
    return compress(orjson.dumps(obj))


def unpack(data: bytes) -> Any:
    """The inverse of pack()."""
    return orjson.loads(decompress(data))


# --- against a prefix -------------------------------------------------------------------


def _prefix_dict(prefix: bytes) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(prefix, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def compress_with(data: bytes, prefix: bytes, level: int = LEVEL,
                  checksum: bool = False) -> bytes:
    """A frame of `data` that may copy from `prefix`; decompress_with(frame, prefix) undoes it.
    Without a prefix it is an ordinary frame. No checksum unless asked (4 bytes, checked by
    decompress_with): the size in the header is checked, and callers that need more check a
    content hash."""
    if not data:
        return b""
    if not prefix:
        return compress(data)
    return zstandard.ZstdCompressor(
        level=level, dict_data=_prefix_dict(prefix), write_checksum=checksum,
        write_dict_id=False).compress(data)


def decompress_with(frame: bytes, prefix: bytes) -> bytes:
    if not frame:
        return b""
    if not prefix:
        return decompress(frame)
    return zstandard.ZstdDecompressor(dict_data=_prefix_dict(prefix)).decompress(frame)


# --- streams of pieces ------------------------------------------------------------------


class Stream:
    """The compressing side of a stream: piece(data) returns bytes that, appended to the
    pieces before them, decode to everything fed so far."""

    def __init__(self, level: int = STREAM_LEVEL, prefix: bytes = b"",
                 table_log: int = STREAM_TABLE_LOG, trained: int | None = None) -> None:
        self.held = stream_tables(table_log)  # and the window, as far as it is filled
        # A prefix (store.dictionaries) is content the stream may refer back into from its
        # first piece; decode_pieces needs the same bytes. A trained dictionary (an id of
        # TRAINED) is named in the frame, and decode_pieces finds it by that.
        self._kind = (level, table_log, prefix, trained)
        self._compressor = _idle_compressors.take(self._kind)
        self._obj = self._compressor.compressobj()  # a new frame, whoever used it before
        self.fed = 0  # plain bytes so far

    def piece(self, data: bytes) -> bytes:
        self.fed += len(data)
        return self._obj.compress(data) + self._obj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)

    def __del__(self) -> None:
        # Nothing else holds the compressor (its compressobj dies with this stream), so the
        # next stream of this kind may start its frame on it. Refcounting runs this as soon
        # as the last owner lets go: a session encoder dropped from the writer's budget,
        # or a batch that still held it. (None: __init__ failed before it had one.)
        compressor = getattr(self, "_compressor", None)
        if compressor is not None:
            _idle_compressors.give_back(self._kind, compressor)


class _IdleCompressors:
    """Compressors of streams that ended, kept for the next streams of the same kind (level,
    table size, prefix). Past the encoders' budget (store.batch), `serve`'s writer makes two
    streams a call and drops two: a new compressor allocates ~1.3 MB of match tables and
    buffers, which the writer process maps rather than takes from its heap (see
    recorder/writer_process.py CHILD_ENV), and paid the page faults and unmapping every
    time: 0.50 ms for a pack stream's first piece, against 0.014 ms on a reused one. A
    reused one starts a clean frame (zstd resets it) and writes the same bytes. The KEEP
    latest are kept, so their memory stays a few windows' worth and a kind no longer made
    (an old harness version's prefix) is soon let go."""

    KEEP = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a stream may die in any thread that held it last
        self._free: list[tuple[tuple, zstandard.ZstdCompressor]] = []  # oldest first

    def take(self, kind: tuple) -> zstandard.ZstdCompressor:
        with self._lock:
            for at in range(len(self._free) - 1, -1, -1):
                if self._free[at][0] == kind:
                    return self._free.pop(at)[1]
        level, table_log, prefix, trained = kind
        extra = {}
        if trained:
            extra["dict_data"] = _trained_for(trained, level, table_log)
        elif prefix:
            extra["dict_data"] = _stream_prefix(prefix, level, table_log)
        return zstandard.ZstdCompressor(compression_params=_stream_params(level, table_log),
                                        **extra)

    def give_back(self, kind: tuple, compressor: zstandard.ZstdCompressor) -> None:
        with self._lock:
            self._free.append((kind, compressor))
            del self._free[:-self.KEEP]


_idle_compressors = _IdleCompressors()


@functools.cache
def _stream_params(level: int, table_log: int) -> zstandard.ZstdCompressionParameters:
    return zstandard.ZstdCompressionParameters.from_level(
        level, window_log=STREAM_WINDOW_LOG, hash_log=table_log, chain_log=table_log,
        write_dict_id=True)  # a raw prefix has no id to write; a trained dictionary does


@functools.cache
def _trained(dict_id: int) -> zstandard.ZstdCompressionDict:
    name = TRAINED.get(dict_id)
    if name is None:
        raise StoreError(f"a stream names zstd dictionary {dict_id}, which this forge-record "
                         "does not have (was it written by a newer forge-record?)")
    made = zstandard.ZstdCompressionDict(
        (Path(__file__).parent / name).read_bytes(), dict_type=zstandard.DICT_TYPE_FULLDICT)
    if made.dict_id() != dict_id:
        raise StoreError(f"{name} is dictionary {made.dict_id()}, not {dict_id}")
    return made


@functools.cache
def _trained_for(dict_id: int, level: int, table_log: int) -> zstandard.ZstdCompressionDict:
    """A trained dictionary with its match tables built once for these parameters."""
    made = zstandard.ZstdCompressionDict(_trained(dict_id).as_bytes(),
                                         dict_type=zstandard.DICT_TYPE_FULLDICT)
    made.precompute_compress(compression_params=_stream_params(level, table_log))
    return made


@functools.lru_cache(maxsize=8)
def _stream_prefix(prefix: bytes, level: int, table_log: int) -> zstandard.ZstdCompressionDict:
    """A prefix with its match tables built once. Every pack stream of a harness version
    starts from the same dictionary (store.dictionaries), and building its tables from 1 MB of
    content took 5 ms a stream, which `serve` starts for nearly every call once its open
    sessions outgrow the encoders' budget; made once, a new stream copies them (0.13 to 0.24
    ms). The frames are the same bytes either way. A harness version's bytes are one object,
    so their hash is computed once."""
    made = _prefix_dict(prefix)
    made.precompute_compress(compression_params=_stream_params(level, table_log))
    return made


# A finished pack group is sealed (store.seal): its plain bytes again as one frame. On a real
# 150-call Claude Code session's group (554 KB plain, 150.8 KB in pieces at level 9), CPU
# once: level 9 143.9 KB in 6 ms, 12 140.9 KB in 9 ms, 15 139.7 KB in 33 ms, 17 134.4 KB in
# 56 ms, 19 133.1 KB in 121 ms. Level 17 cost the writer 0.5 ms more a call on the real
# 1,000-call session at 212 KB a request (SQLite: 1.70 -> 2.22 ms of store CPU, against 1.81
# at level 12), a sixth of issue 21's 3 ms budget, for 6.5 KB a session. Tables of 2^20
# entries (~8 MB) do as well as a level's own on a segment; the window is a stream's, which
# decode_pieces allows.
SEAL_LEVEL = 12
SEAL_TABLE_LOG = 20


def seal(plain: bytes, prefix: bytes = b"", trained: int | None = None) -> bytes:
    """`plain` as one frame that decode_pieces([frame], prefix) decodes: what a stream of
    pieces holding the same bytes from the same prefix (or TRAINED dictionary) becomes once
    no piece will follow."""
    params = zstandard.ZstdCompressionParameters.from_level(
        SEAL_LEVEL, window_log=STREAM_WINDOW_LOG, hash_log=SEAL_TABLE_LOG,
        chain_log=SEAL_TABLE_LOG, write_dict_id=bool(trained))
    extra = ({"dict_data": _trained(trained)} if trained else
             {"dict_data": _prefix_dict(prefix)} if prefix else {})
    return zstandard.ZstdCompressor(compression_params=params, **extra).compress(plain)


def decode_pieces(pieces: Iterable[bytes], prefix: bytes = b"") -> list[bytes]:
    """The plain bytes of each piece; the first piece must be the stream's first, `prefix`
    the one the stream was made with (a trained dictionary is found by the id the frame
    names)."""
    pieces = list(pieces)
    named = trained_id(next((p for p in pieces if p), b""))
    extra = {"dict_data": _trained(named)} if named else (
        {"dict_data": _prefix_dict(prefix)} if prefix else {})
    obj = zstandard.ZstdDecompressor(
        max_window_size=1 << STREAM_WINDOW_LOG, **extra).decompressobj()
    return [obj.decompress(p) if p else b"" for p in pieces]


def trained_id(first_piece: bytes) -> int:
    """The TRAINED dictionary a stream's first piece names; 0 for none."""
    return zstandard.get_frame_parameters(first_piece).dict_id if first_piece else 0
