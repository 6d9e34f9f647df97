"""Incremental Content-Encoding decoders for the tee side of a stream.

The agent receives the encoded bytes untouched; only the copy fed to a dialect decoder is
decoded, chunk by chunk, so a compressed SSE stream is still decoded as it flows.
`decoder_for(header)` returns a `decode(chunk) -> bytes` callable; `None` for an encoding it
does not know, in which case the exchange is stored raw and flagged.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import brotli
import zstandard  # wire encoding, not storage: mitmproxy depends on it too

ChunkDecoder = Callable[[bytes], bytes]


def _identity(chunk: bytes) -> bytes:
    return chunk


def _zlib(wbits: int) -> ChunkDecoder:
    d = zlib.decompressobj(wbits)
    return d.decompress


def _deflate() -> ChunkDecoder:
    # "deflate" is zlib-wrapped by the spec but raw deflate in practice often enough that
    # clients sniff it; decide on the first bytes.
    state: dict[str, ChunkDecoder] = {}

    def decode(chunk: bytes) -> bytes:
        if "d" not in state:
            if not chunk:
                return b""
            zlib_header = (chunk[0] & 0x0F) == 8 and int.from_bytes(chunk[:2], "big") % 31 == 0
            state["d"] = _zlib(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
        return state["d"](chunk)

    return decode


def _brotli() -> ChunkDecoder:
    d = brotli.Decompressor()
    return lambda chunk: d.process(chunk) if chunk else b""


def _zstd() -> ChunkDecoder:
    d = zstandard.ZstdDecompressor().decompressobj()
    return lambda chunk: d.decompress(chunk) if chunk else b""


_FACTORIES: dict[str, Callable[[], ChunkDecoder]] = {
    "": lambda: _identity,
    "identity": lambda: _identity,
    "gzip": lambda: _zlib(zlib.MAX_WBITS | 16),
    "x-gzip": lambda: _zlib(zlib.MAX_WBITS | 16),
    "deflate": _deflate,
    "br": _brotli,
    "zstd": _zstd,
}


def decoder_for(content_encoding: str | None) -> ChunkDecoder | None:
    """A chunk decoder for a Content-Encoding header value (stacked codings applied in
    reverse order), or None when one of them is unknown."""
    names = [n.strip().lower() for n in (content_encoding or "").split(",") if n.strip()]
    steps: list[ChunkDecoder] = []
    for name in reversed(names):
        factory = _FACTORIES.get(name)
        if factory is None:
            return None
        steps.append(factory())
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
    except (zlib.error, brotli.error, zstandard.ZstdError):
        return None
