"""A finished segment's manifests and raw responses, each sealed as one frame.

While a segment is written, every exchange row holds its own piece of the segment's manifest
stream (`record`) and its own raw response frame (store.delta): what lets each call be
stored on its own, at a price. A piece ends a zstd block; a response frame is compressed
against its manifest, its parent's response and its answer only. Once the segment is
finished (store.seal), its first row (piece 0) takes both, sealed, and the other rows keep
empty `record` and `raw_response` columns:

    record        b"S" zstd(varint(n) varint(len(manifest)) * n  manifests...,
                       dictionary = compression.MANIFESTS)
    raw_response  b"S" zstd(varint(n) (mode varint(values) varint(lengths) varint(skeleton)
                            varint(strand)) * n  lengths... skeletons... strands...,
                       prefix = (manifest answer) * n)

The manifests are the plain bytes the pieces decoded to. A response is cut as its frame cut
it (store.strands; one kept whole is mode strands.WHOLE, the body as its skeleton), each part
of every response next to the same part of the others (the skeletons' framing repeats from
one response to the next, the lengths and the strands are alike), and compressed against
every manifest (ids and usage the framing repeats) and every answer blob (the text the
strands hold). The manifests and answers are what a reader has: piece 0's record, and the
blobs those manifests name. On a real 150-call Claude Code session: manifests 37.0 to 30.1
KB, raw responses 25.9 to 13.3 KB. Raw requests stay in their rows: a delta needs its parent's
body anyway, and a keyframe already is one frame.

b"S" begins no piece of a stream (a zstd frame begins with its magic number) and no raw
response frame (b"", b"K", b"T"), so a reader tells a sealed segment by its first row.
"""

from __future__ import annotations

from collections.abc import Iterable

from forge_record.errors import StoreError
from forge_record.store import compression, strands
from forge_record.store.delta import read_varint, read_varints, varint, varints

MARK = b"S"


def is_sealed(column: bytes) -> bool:
    return column[:1] == MARK


def manifest_plains(records: list[bytes]) -> list[bytes]:
    """The plain bytes of a segment's manifests, from its rows' `record`s in piece order
    (from piece 0, up to any piece), sealed or not."""
    if records and is_sealed(records[0]):
        return unseal_manifests(records[0])[:len(records)]
    return compression.decode_pieces(records)


def seal_manifests(plains: list[bytes]) -> bytes:
    plain = _lengths(plains) + b"".join(plains)
    return MARK + compression.seal(plain, trained=compression.MANIFESTS)


def unseal_manifests(record: bytes) -> list[bytes]:
    [plain] = compression.decode_pieces([record[1:]])
    lengths, at = _read_lengths(plain, 0)
    if at + sum(lengths) != len(plain):
        raise StoreError("a sealed segment's manifests do not add up to their lengths")
    return _cut(plain, at, lengths)


def seal_responses(cuts: list[strands.Cut], manifests: list[bytes], answers: list[bytes]
                   ) -> bytes:
    """The segment's raw responses, as their frames cut them (delta.response_cut), as one
    frame; `manifests` and `answers` (b"" for an exchange without one) are each exchange's,
    in piece order."""
    heads, sections = [], ([], [], [])
    for mode, skeleton, lengths, strand in cuts:
        values = varints(lengths)
        heads.append(bytes([mode]) + varint(len(lengths)) + varint(len(values))
                     + varint(len(skeleton)) + varint(len(strand)))
        for section, part in zip(sections, (values, skeleton, strand), strict=True):
            section.append(part)
    plain = varint(len(cuts)) + b"".join(heads) + b"".join(b"".join(s) for s in sections)
    return MARK + compression.seal(plain, _prefix(manifests, answers))


def unseal_responses(frame: bytes, manifests: list[bytes], answers: list[bytes]) -> list[bytes]:
    """The bodies of the cuts seal_responses() was given."""
    return [strands.join(*cut) for cut in unseal_cuts(frame, manifests, answers)]


def unseal_cuts(frame: bytes, manifests: list[bytes], answers: list[bytes]
                ) -> list[strands.Cut]:
    """The cuts seal_responses() was given."""
    [plain] = compression.decode_pieces([frame[1:]], _prefix(manifests, answers))
    n, at = read_varint(plain, 0)
    heads = []
    for _ in range(n):
        mode = plain[at]
        sizes, at = read_varints(plain, at + 1, 4)  # count, and the three sections' sizes
        heads.append((mode, *sizes))
    sections = []
    for k in (2, 3, 4):  # the lengths, skeleton and strand sections, one after another
        parts = _cut(plain, at, [h[k] for h in heads])
        at += sum(map(len, parts))
        sections.append(parts)
    if at != len(plain) or len(manifests) != n:
        raise StoreError("a sealed segment's raw responses do not match its manifests")
    return [(mode, skeleton, read_varints(values, 0, count)[0], strand)
            for (mode, count, _, _, _), values, skeleton, strand in zip(heads, *sections,
                                                                        strict=True)]


def _prefix(manifests: Iterable[bytes], answers: Iterable[bytes]) -> bytes:
    return b"".join(m + a for m, a in zip(manifests, answers, strict=True))


def _lengths(parts: list[bytes]) -> bytes:
    return varint(len(parts)) + varints([len(p) for p in parts])


def _read_lengths(data: bytes, at: int) -> tuple[list[int], int]:
    count, at = read_varint(data, at)
    return read_varints(data, at, count)


def _cut(data: bytes, at: int, lengths: list[int]) -> list[bytes]:
    out = []
    for n in lengths:
        out.append(data[at:at + n])
        at += n
    if at > len(data):
        raise StoreError("a sealed segment is shorter than its lengths say")
    return out
