"""forge_record.exporters: recorded sessions into the formats trainers and tools read.

    FORMATS                          format name -> module (one module per format)
    export(store, fmt, out, ...)     stream the selected sessions into one format; a Tally

Every exporter reads the store session by session through the Store API (never SQL, never
the whole store), converts through the normalized record (so any recorded dialect goes to any
format), writes as it goes, and counts what it left out instead of failing. docs/EXPORT.md
describes each format field by field.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from forge_record.exporters.base import Options, Tally
from forge_record.exporters.select import Filters, session_ids
from forge_record.exporters.units import load_session

FORMATS = {
    "openai": "forge_record.exporters.openai",
    "anthropic": "forge_record.exporters.anthropic",
    "sharegpt": "forge_record.exporters.sharegpt",
    "calls": "forge_record.exporters.calls",
    "trajectories": "forge_record.exporters.trajectories",
    "parquet": "forge_record.exporters.parquet",
    "otel": "forge_record.exporters.otel",
    "tokens": "forge_record.exporters.tokens",
}
DIRECTORY_FORMATS = {"parquet"}  # written as shards into a directory, never to stdout

__all__ = ["DIRECTORY_FORMATS", "FORMATS", "Filters", "Options", "Tally", "export"]


def exporter_class(fmt: str) -> type:
    return importlib.import_module(FORMATS[fmt]).Exporter


def export(
    store: Any,
    fmt: str,
    out: Any,
    filters: Filters | None = None,
    options: Options | None = None,
    progress: Callable[[list[str]], Iterable[str]] | None = None,
) -> Tally:
    """Write the sessions `filters` selects to `out` (a binary stream, or a directory for
    the directory formats) as `fmt`; return what was exported and skipped."""
    filters, options = filters or Filters(), options or Options()
    tally = Tally()
    exporter = exporter_class(fmt)(out, options, tally)
    fingerprints = getattr(exporter, "fingerprints", True)  # whether its lines carry them
    ids = session_ids(store, filters, tally)
    try:
        for session_id in progress(ids) if progress else ids:
            before = tally.exported
            exporter.write_session(load_session(store, session_id, fingerprints))
            tally.sessions += tally.exported > before
    finally:
        exporter.close()
    return tally
