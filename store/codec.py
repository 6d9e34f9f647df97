"""Bytes in the store: zstd frames, and zstd frames of orjson documents.

The only module that imports zstandard. zstandard's compressor and decompressor objects are
not thread-safe, so each thread keeps its own pair (the writer thread compresses while a CLI
thread may be reading). Empty input stays empty: most exchanges have no raw body on one side,
and an empty frame would still cost ~9 bytes.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson
import zstandard

LEVEL = 3  # zstd's own default: fast enough for the writer thread, ~4-10x on JSON bodies

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
