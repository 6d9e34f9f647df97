"""`calls`: one JSON line per model call, the input/output pair a training proxy records.

Each line holds the call's full request context and its response as normalized records
(docs/records.md; dialect-neutral, so sessions from every API read alike), where it sits
(session, thread, segment, seq, parent call, the call it retried), the harness fingerprint,
the usage, and a `reward` slot: the session label's reward, null unless labelled. The Parquet
exporter writes the same fields (`row`), with the nested records as JSON text.
"""

from __future__ import annotations

from typing import IO, Any

from forge_record.exporters.base import JsonLines, Options, Tally
from forge_record.exporters.units import CallInfo, SessionData, calls, model_of
from forge_record.records import Exchange, request_to_dict, response_to_dict

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                "reasoning_tokens")


class Exporter:
    def __init__(self, out: IO[bytes], options: Options, tally: Tally) -> None:
        self.lines = JsonLines(out)
        self.options = options
        self.tally = tally

    def write_session(self, data: SessionData) -> None:
        for exchange, info in calls(data, self.options, self.tally):
            self.lines.write(row(data, exchange, info))
            self.tally.exported += 1

    def close(self) -> None:
        pass


def row(data: SessionData, ex: Exchange, info: CallInfo) -> dict[str, Any]:
    session = data.session
    usage = ex.response.usage if ex.response else None
    label = data.label or {}
    return {
        "session_id": session.id,
        "thread_id": info.thread,
        "thread_role": info.thread_role,
        "call_role": info.role,
        "segment": info.segment,
        "seq": ex.seq,
        "parent_seq": info.parent,
        "retry_of": info.retry_of,
        "harness": session.harness,
        "harness_version": session.harness_version,
        "fingerprint_id": info.fingerprint_id,
        "fingerprint": info.fingerprint,
        "dialect": ex.dialect,
        "kind": ex.kind,
        "model": model_of(ex),
        "status": ex.status,
        "http_status": ex.http_status,
        "started_at": ex.started_at,
        "ended_at": ex.ended_at,
        "usage": {f: getattr(usage, f) if usage else None for f in USAGE_FIELDS},
        "flags": list(ex.flags),
        "request": request_to_dict(ex.request) if ex.request else None,
        "response": response_to_dict(ex.response) if ex.response else None,
        "reward": label.get("reward"),
        "label_tags": label.get("tags") or {},
        "session_tags": dict(session.tags),
    }
