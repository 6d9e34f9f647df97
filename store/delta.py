"""Raw bodies as deltas: byte-exact, small, and rebuilt from a bounded chain.

An agent's request body is its previous request body with a little changed: new messages
appended, a `cache_control` marker moved, everything else identical. So a body is stored as

    b"D" varint(p) varint(s) zstd(middle, prefix = hint + base)

where p and s are the lengths of the prefix and suffix it shares byte for byte with its
parent's body, `middle` is what lies between them, and `base` is the parent's bytes between
the same two points. `hint` is bytes the reader also has: the blobs of the messages this
exchange added, so text that first appeared in the normalized record costs nothing twice.
A body with no parent is a keyframe, b"K" zstd(body, prefix = hint), where the hint holds
every blob of the request: compressed against its own normalized content, a keyframe of a
500 KB body costs a few KB. A request frame may start with a rendering's mark (one byte,
store.wire): its hint is then those blobs rendered in the dialect's wire form, which a body
matches in a few long runs.
The writer makes every RAW_KEYFRAME_EVERY-th body of a chain a keyframe, so rebuilding any
body decompresses at most that many frames.

Empty bodies stay b"". Nothing here knows JSON: any bytes work, and a parent that shares
nothing just makes a bigger middle.
"""

from __future__ import annotations

from forge_record.shared_ends import common_ends
from forge_record.store import compression, strands

RAW_KEYFRAME_EVERY = 32
# Every frame is zstd's default level. Level 6 made the few-KB middles and responses ~4%
# smaller in all (bench/storage.py: 294 against 305 KB for the 150-call session) for 1.7x the
# CPU per frame, most of it spent loading the prefix; the writer's CPU is what the recorder
# costs the machine. Raw responses are the exception (RESPONSE_LEVEL): a few KB of SSE framing
# against the parent's response, where level 6 stores 47 instead of 58 KB for the 150-call
# session (bench/storage.py) for 0.06 ms more a response.
RESPONSE_LEVEL = 6
# Keyframes (every RAW_KEYFRAME_EVERY-th body, compressed against its request's blobs) are
# half of a session's raw requests: at level 9 instead of 3 the 150-call session's raw
# requests take 33.6 instead of 37.9 KB, for a few ms more a keyframe (~0.1 ms a call);
# level 15 saved 1.3 KB more for three times that.
KEYFRAME_LEVEL = 9


def encode(body: bytes, parent: bytes | None, hint: bytes,
           level: int = compression.LEVEL, mark: bytes = b"") -> bytes:
    """`mark`: the rendering `hint` is (store.wire), written before the K or D frame; a
    rendered keyframe carries zstd's checksum."""
    if not body:
        return b""
    if parent is None:
        return mark + b"K" + compression.compress_with(
            body, hint, max(level, KEYFRAME_LEVEL), checksum=bool(mark))
    p, s = common_ends(body, parent)
    middle, base = body[p : len(body) - s], parent[p : len(parent) - s]
    return (mark + b"D" + varint(p) + varint(s)
            + compression.compress_with(middle, hint + base, level))


def mark(frame: bytes) -> bytes:
    """The mark of the rendering a raw request frame's hint is (store.wire), b"" if plain."""
    return b"" if frame[:1] in (b"", b"K", b"D") else frame[:1]


def encode_response(body: bytes, hint: bytes, record: bytes = b"") -> bytes:
    """A raw response: cut into framing and text (store.strands) when that rebuilds it,
    b"T" mode varint(values) varint(len(skeleton)) zstd(lengths skeleton strand,
    prefix = record + hint), where `record` is the exchange's manifest (the response's id
    and usage, which the framing repeats); else a keyframe against `hint` like any body."""
    cut = strands.split(body)
    if cut is None:
        return encode(body, None, hint, RESPONSE_LEVEL)
    mode, skeleton, lengths, strand = cut
    plain = varints(lengths) + skeleton + strand
    return (b"T" + bytes([mode]) + varint(len(lengths)) + varint(len(skeleton))
            + compression.compress_with(plain, record + hint, RESPONSE_LEVEL))


def decode_response(frame: bytes, hint: bytes, record: bytes = b"") -> bytes:
    return strands.join(*response_cut(frame, hint, record))


def response_cut(frame: bytes, hint: bytes, record: bytes = b"") -> strands.Cut:
    """What decode_response() joins: the frame's (mode, skeleton, lengths, strand), or
    (strands.WHOLE, body, [], b"") for a frame of the whole body."""
    if frame[:1] == b"T":
        return _strands(frame[1:], record + hint)
    return strands.WHOLE, decode(frame, None, hint), [], b""


def decode(frame: bytes, parent: bytes | None, hint: bytes) -> bytes:
    if not frame:
        return b""
    frame = frame[len(mark(frame)):]  # the caller rendered the hint accordingly
    kind, rest = frame[:1], frame[1:]
    if kind == b"K":
        return compression.decompress_with(rest, hint)
    if kind != b"D" or parent is None:
        raise ValueError(f"not a raw body frame, or a delta without its parent: {kind!r}")
    p, at = read_varint(rest, 0)
    s, at = read_varint(rest, at)
    base = parent[p : len(parent) - s]
    middle = compression.decompress_with(rest[at:], hint + base)
    return parent[:p] + middle + parent[len(parent) - s :]


def _strands(rest: bytes, hint: bytes) -> strands.Cut:
    mode = rest[0]
    count, at = read_varint(rest, 1)
    skeleton_length, at = read_varint(rest, at)
    plain = compression.decompress_with(rest[at:], hint)
    lengths, at = read_varints(plain, 0, count)
    skeleton = plain[at:at + skeleton_length]
    return mode, skeleton, lengths, plain[at + skeleton_length:]


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def varints(ns: list[int]) -> bytes:
    """varint(n) for each n, one after another. Nearly every length a response is cut into
    (an event's text, a token or a few) is one byte: then it is the bytes themselves."""
    if max(ns, default=0) < 0x80:
        return bytes(ns)
    return b"".join(map(varint, ns))


def read_varints(data: bytes, at: int, count: int) -> tuple[list[int], int]:
    """`count` varints from `at`, and where they end: the inverse of varints()."""
    if max(data[at:at + count], default=0) < 0x80:
        return list(data[at:at + count]), at + count
    out = []
    for _ in range(count):
        n, at = read_varint(data, at)
        out.append(n)
    return out, at


def read_varint(data: bytes, at: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        byte = data[at]
        at += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, at
