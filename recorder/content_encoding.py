"""Incremental Content-Encoding decoders for the tee side of a stream.

The agent receives the encoded bytes untouched; only the copy fed to a dialect decoder is
decoded, chunk by chunk, so a compressed SSE stream is still decoded as it flows.
`decoder_for(header)` returns a `decode(chunk) -> bytes` callable; `None` for an encoding it
does not know, in which case the exchange is stored raw and flagged.

With `max_output`, a decoder raises `TooLarge` instead of producing more than that many bytes
in all: a few kilobytes of gzip can expand to gigabytes (a decompression bomb), and the tee
must never hold that in memory. gzip, deflate and brotli stop at the limit inside one call;
zstd is bounded by its window size per call and checked after it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import brotli
import zstandard  # wire encoding, not storage: mitmproxy depends on it too

ChunkDecoder = Callable[[bytes], bytes]
_ZSTD_MAX_WINDOW = 1 << 25  # 32 MiB, more than any HTTP body encoder uses


class TooLarge(Exception):
    """The decoded body would exceed the limit given to `decoder_for`."""


def _identity(chunk: bytes) -> bytes:
    return chunk


def _zlib(wbits: int, limit: int) -> ChunkDecoder:
    d = zlib.decompressobj(wbits)
    produced = 0

    def decode(chunk: bytes) -> bytes:
        nonlocal produced
        out = d.decompress(chunk, limit - produced + 1)
        produced += len(out)
        if produced > limit:
            raise TooLarge(limit)
        return out

    return decode


def _deflate(limit: int) -> ChunkDecoder:
    # "deflate" is zlib-wrapped by the spec but raw deflate in practice often enough that
    # clients sniff it; decide on the first bytes.
    state: dict[str, ChunkDecoder] = {}

    def decode(chunk: bytes) -> bytes:
        if "d" not in state:
            if not chunk:
                return b""
            zlib_header = (chunk[0] & 0x0F) == 8 and int.from_bytes(chunk[:2], "big") % 31 == 0
            state["d"] = _zlib(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS, limit)
        return state["d"](chunk)

    return decode


def _bounded(step: Callable[[bytes, int], bytes], limit: int) -> ChunkDecoder:
    produced = 0

    def decode(chunk: bytes) -> bytes:
        nonlocal produced
        if not chunk:
            return b""
        out = step(chunk, limit - produced + 1)
        produced += len(out)
        if produced > limit:
            raise TooLarge(limit)
        return out

    return decode


def _brotli(limit: int) -> ChunkDecoder:
    d = brotli.Decompressor()
    return _bounded(lambda chunk, room: d.process(chunk, output_buffer_limit=room), limit)


def _zstd(limit: int) -> ChunkDecoder:
    d = zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW).decompressobj()
    return _bounded(lambda chunk, room: d.decompress(chunk), limit)


_FACTORIES: dict[str, Callable[[int], ChunkDecoder]] = {
    "": lambda limit: _identity,
    "identity": lambda limit: _identity,
    "gzip": lambda limit: _zlib(zlib.MAX_WBITS | 16, limit),
    "x-gzip": lambda limit: _zlib(zlib.MAX_WBITS | 16, limit),
    "deflate": _deflate,
    "br": _brotli,
    "zstd": _zstd,
}


def decoder_for(content_encoding: str | None, max_output: int = 1 << 40) -> ChunkDecoder | None:
    """A chunk decoder for a Content-Encoding header value (stacked codings applied in
    reverse order), or None when one of them is unknown."""
    names = [n.strip().lower() for n in (content_encoding or "").split(",") if n.strip()]
    steps: list[ChunkDecoder] = []
    for name in reversed(names):
        factory = _FACTORIES.get(name)
        if factory is None:
            return None
        steps.append(factory(max_output))
    if not steps:
        return _identity
    if len(steps) == 1:
        return steps[0]

    def decode(chunk: bytes) -> bytes:
        for step in steps:
            chunk = step(chunk)
        return chunk

    return decode


def decode_body(content_encoding: str | None, body: bytes) -> bytes | None:
    """A whole body decoded, or None when the encoding is unknown or the bytes are bad."""
    decode = decoder_for(content_encoding)
    if decode is None:
        return None
    try:
        return decode(body)
    except (zlib.error, brotli.error, zstandard.ZstdError, TooLarge):
        return None
