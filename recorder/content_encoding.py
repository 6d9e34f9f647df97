"""Incremental Content-Encoding decoders for the tee side of a stream.

The agent receives the encoded bytes untouched; only the copy fed to a dialect decoder is
decoded, chunk by chunk, so a compressed SSE stream is still decoded as it flows.
`decoder_for(header)` returns a `ContentDecoder`, or `None` for an encoding it does not know
(the exchange is then stored raw and flagged). A decoder has httpx's shape: `decode(data)`
returns the bytes `data` completes, `flush()` at the end of the body returns what is left.
One class per encoding; stacked encodings (`gzip, br`) are undone in reverse order by
`Stacked`. A body cut short is not an error at `flush()`: a recorder keeps what arrived.

zstd bodies may hold several frames back to back (a streaming encoder may end a frame
wherever it flushes): each frame ends its decompressor, and the next frame gets a new one, as
httpx's decoder does, whether the boundary falls inside a chunk or between two.

With `max_output`, a decoder raises `TooLarge` instead of producing more than that many bytes
in all: a few kilobytes of gzip can expand to gigabytes (a decompression bomb), and the tee
must never hold that in memory. gzip, deflate and brotli stop at the limit inside one call;
zstd is bounded by its window size per call and checked after it.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import brotli
import zstandard  # wire encoding, not storage: mitmproxy depends on it too

_ZSTD_MAX_WINDOW = 1 << 25  # 32 MiB, more than any HTTP body encoder uses
_NO_LIMIT = 1 << 40


class TooLarge(Exception):
    """The decoded body would exceed the limit given to `decoder_for`."""


class ContentDecoder(Protocol):
    def decode(self, data: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


class Identity:
    def decode(self, data: bytes) -> bytes:
        return data

    def flush(self) -> bytes:
        return b""


IDENTITY = Identity()  # holds no state: one for every exchange


class _Capped:
    """Counts what a decoder produced against its limit."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._produced = 0

    def _room(self) -> int:
        """The most output the next step may produce: one byte past the limit tells it."""
        return self._limit - self._produced + 1

    def _count(self, out: bytes) -> bytes:
        self._produced += len(out)
        if self._produced > self._limit:
            raise TooLarge(self._limit)
        return out


class Zlib(_Capped):
    """gzip (`wbits` = MAX_WBITS | 16), zlib-wrapped or raw deflate."""

    def __init__(self, wbits: int, limit: int) -> None:
        super().__init__(limit)
        self._d = zlib.decompressobj(wbits)

    def decode(self, data: bytes) -> bytes:
        # Output past the limit stays in unconsumed_tail: TooLarge is raised before it matters.
        return self._count(self._d.decompress(data, self._room())) if data else b""

    def flush(self) -> bytes:
        return self._count(self._d.flush())


class Deflate(_Capped):
    """"deflate" is zlib-wrapped by the spec but raw deflate in practice often enough that
    clients sniff it; decided on the first bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._inner: Zlib | None = None

    def decode(self, data: bytes) -> bytes:
        if self._inner is None:
            if not data:
                return b""
            zlib_header = (data[0] & 0x0F) == 8 and int.from_bytes(data[:2], "big") % 31 == 0
            self._inner = Zlib(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS, self._limit)
        return self._inner.decode(data)

    def flush(self) -> bytes:
        return b"" if self._inner is None else self._inner.flush()


class Brotli(_Capped):
    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._d = brotli.Decompressor()

    def decode(self, data: bytes) -> bytes:
        return self._count(self._d.process(data, output_buffer_limit=self._room())) if data \
            else b""

    def flush(self) -> bytes:
        return b""  # process() returns all it can: nothing is held back


class Zstd(_Capped):
    """One decompressor per frame: a frame's end starts the next frame's decompressor."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._d = self._new()

    @staticmethod
    def _new() -> zstandard.ZstdDecompressionObj:
        return zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW).decompressobj()

    def decode(self, data: bytes) -> bytes:
        out = []
        while data:
            if self._d.eof:  # the frame before ended exactly where this data starts
                self._d = self._new()
            out.append(self._count(self._d.decompress(data)))
            data = self._d.unused_data if self._d.eof else b""  # the next frame's bytes
        return b"".join(out)

    def flush(self) -> bytes:
        return b""  # decompress() returns all it can: nothing is held back


class Stacked:
    """Encodings applied in turn (`Content-Encoding: gzip, br`): `steps` undo them, last
    applied first."""

    def __init__(self, steps: list[ContentDecoder]) -> None:
        self._steps = steps

    def decode(self, data: bytes) -> bytes:
        for step in self._steps:
            data = step.decode(data)
        return data

    def flush(self) -> bytes:
        data = b""
        for step in self._steps:  # what an outer step held back still passes the inner ones
            data = step.decode(data) + step.flush()
        return data


_DECODERS = {
    "gzip": lambda limit: Zlib(zlib.MAX_WBITS | 16, limit),
    "x-gzip": lambda limit: Zlib(zlib.MAX_WBITS | 16, limit),
    "deflate": Deflate,
    "br": Brotli,
    "zstd": Zstd,
}
_IDENTITY_NAMES = ("", "identity")


def decoder_for(content_encoding: str | None, max_output: int = _NO_LIMIT) -> ContentDecoder | None:
    """A decoder for a Content-Encoding header value (stacked codings undone in reverse
    order), or None when one of them is unknown."""
    names = [n.strip().lower() for n in (content_encoding or "").split(",") if n.strip()]
    steps: list[ContentDecoder] = []
    for name in reversed(names):
        if name in _IDENTITY_NAMES:
            continue
        make = _DECODERS.get(name)
        if make is None:
            return None
        steps.append(make(max_output))
    if not steps:
        return IDENTITY
    return steps[0] if len(steps) == 1 else Stacked(steps)


def decode_body(content_encoding: str | None, body: bytes) -> bytes | None:
    """A whole body decoded, or None when the encoding is unknown or the bytes are bad."""
    decoder = decoder_for(content_encoding)
    if decoder is None:
        return None
    try:
        return decoder.decode(body) + decoder.flush()
    except (zlib.error, brotli.error, zstandard.ZstdError, TooLarge):
        return None
