"""`parquet`: the `calls` rows as Parquet shards, for `datasets.load_dataset("parquet", ...)`.

Needs pyarrow (`pip install 'forge-record[parquet]'`). The output is a directory of shards
`calls-00000.parquet`, `calls-00001.parquet`, ... of at most `SHARD_ROWS` rows each, written
a row group at a time (`GROUP_ROWS` rows or `GROUP_BYTES` of JSON, whichever comes first),
so memory holds one row group, never the export. The schema (`SCHEMA`, docs/EXPORT.md) is
the calls line with its scalar fields as typed columns, usage as columns of its own, and the
nested records (request, response, fingerprint, tags) as JSON text: their shape varies block
by block, and a JSON column loads the same in every reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forge_record.errors import UsageError
from forge_record.exporters.base import Options, Tally, dumps
from forge_record.exporters.calls import USAGE_FIELDS, row
from forge_record.exporters.units import SessionData, calls

SHARD_ROWS = 100_000
GROUP_ROWS = 1_000
GROUP_BYTES = 64 << 20
_JSON_COLUMNS = ("fingerprint", "label_tags", "session_tags", "request", "response")


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as e:
        raise UsageError(
            "--format parquet needs pyarrow: pip install 'forge-record[parquet]'") from e
    return pyarrow


def schema():
    pa = _pyarrow()
    text, i64, f64 = pa.string(), pa.int64(), pa.float64()
    return pa.schema([
        ("session_id", text), ("thread_id", text), ("thread_role", text), ("call_role", text),
        ("segment", i64), ("seq", i64), ("parent_seq", i64), ("retry_of", i64),
        ("harness", text), ("harness_version", text), ("fingerprint_id", text),
        ("fingerprint", text), ("dialect", text), ("kind", text), ("model", text),
        ("status", text), ("http_status", i64), ("started_at", f64), ("ended_at", f64),
        *[(f, i64) for f in USAGE_FIELDS],
        ("flags", pa.list_(text)), ("reward", f64),
        ("label_tags", text), ("session_tags", text), ("request", text), ("response", text),
    ])


def flat(line: dict[str, Any]) -> dict[str, Any]:
    """A calls line as one Parquet row."""
    out = {k: v for k, v in line.items() if k != "usage"}
    out.update(line["usage"])
    for column in _JSON_COLUMNS:
        out[column] = None if line[column] is None else dumps(line[column])
    return out


class Exporter:
    def __init__(self, out: Path, options: Options, tally: Tally) -> None:
        self.pa = _pyarrow()
        self.schema = schema()
        self.dir = Path(out)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.options = options
        self.tally = tally
        self.rows: list[dict[str, Any]] = []
        self.pending_bytes = 0
        self.shard = -1
        self.shard_rows = 0
        self.max_rows = SHARD_ROWS
        self.writer = None

    def write_session(self, data: SessionData) -> None:
        for exchange, info in calls(data, self.options, self.tally):
            r = flat(row(data, exchange, info))
            self.rows.append(r)
            self.pending_bytes += len(r["request"] or "") + len(r["response"] or "")
            self.tally.exported += 1
            if len(self.rows) >= GROUP_ROWS or self.pending_bytes >= GROUP_BYTES:
                self._flush()

    def close(self) -> None:
        self._flush()
        if self.writer is None:  # nothing matched: still leave a loadable, empty shard
            self._open_shard()
        self.writer.close()

    def _flush(self) -> None:
        while self.rows:
            if self.writer is None or self.shard_rows >= self.max_rows:
                self._open_shard()
            take = self.rows[: self.max_rows - self.shard_rows]
            del self.rows[: len(take)]
            self.writer.write_table(self.pa.Table.from_pylist(take, schema=self.schema))
            self.shard_rows += len(take)
        self.pending_bytes = 0

    def _open_shard(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.shard += 1
        self.shard_rows = 0
        path = self.dir / f"calls-{self.shard:05d}.parquet"
        self.writer = self.pa.parquet.ParquetWriter(path, self.schema, compression="zstd")
