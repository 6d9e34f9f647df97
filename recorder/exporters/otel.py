"""`otel`: OpenTelemetry GenAI spans as OTLP JSON, one ExportTraceServiceRequest per line.

One line per session, one trace per session (ids derive from the session id, so exporting
twice gives the same trace). Spans follow the GenAI semantic conventions (v1.41):
- `invoke_agent {harness}` (INTERNAL): the session, with `gen_ai.conversation.id`;
- `invoke_agent {harness}` (INTERNAL) for each subagent or side thread, with
  `gen_ai.agent.id` = the thread id: under the `execute_tool` span of the tool call that
  spawned it when lineage knows it (that span lasts until the result came back, as long as
  the subagent ran; the chat span that asked ends before the subagent starts), else under
  the spawner's thread, else under the session;
- `{operation} {model}` (CLIENT) per model call: `chat`, or `generate_content` for Gemini,
  with provider, models, response id, finish reasons, usage (`gen_ai.usage.input_tokens`
  counts cached tokens too, as the conventions ask), time to first chunk, server address,
  `error.type` and an error status when it failed, and the content attributes
  `gen_ai.system_instructions`, `gen_ai.input.messages`, `gen_ai.output.messages` and
  `gen_ai.tool.definitions` as JSON strings;
- `execute_tool {name}` (INTERNAL) per tool call whose result came back in a later call of
  the thread: from the end of the call that asked to the start of the call that answered.
Attributes of our own are under `forge_record.*` (seq, thread, segment, call role, status).
The OTLP JSON encoding writes trace and span ids as hex, enums as integers and int64 values
as decimal strings.
"""

from __future__ import annotations

import hashlib
from typing import IO, Any
from urllib.parse import urlsplit

from forge_record import __version__
from forge_record.exporters.base import JsonLines, Options, Tally, dumps
from forge_record.exporters.otel_parts import (
    attributes,
    finish_reason,
    message,
    nanos,
    part,
    result_text,
    tool_definition,
)
from forge_record.exporters.units import SessionData, ThreadInfo, calls, model_of
from forge_record.records import COMPLETE, ERROR, Exchange, ToolCall, ToolResult

INTERNAL, CLIENT = 1, 3  # Span.SpanKind
STATUS_ERROR = 2
PROVIDERS = {"anthropic.messages": "anthropic", "openai.chat": "openai",
             "openai.responses": "openai", "gemini.generate": "gcp.gemini",
             "gemini.code_assist": "gcp.gen_ai"}


def _id(*parts: object, size: int) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[: size * 2]


class Exporter:
    fingerprints = False  # its lines name no harness fingerprint: lineage need not make them

    def __init__(self, out: IO[bytes], options: Options, tally: Tally) -> None:
        self.lines = JsonLines(out)
        self.options = options
        self.tally = tally

    def write_session(self, data: SessionData) -> None:
        kept = list(calls(data, self.options, self.tally))
        if not kept:
            return
        spans = _Trace(data).spans([ex for ex, _ in kept])
        self.lines.write({"resourceSpans": [{
            "resource": {"attributes": attributes({
                "service.name": data.session.harness or "agent",
                "service.version": data.session.harness_version,
                "host.name": data.session.host})},
            "scopeSpans": [{"scope": {"name": "forge-record", "version": __version__},
                            "spans": spans}],
        }]})
        self.tally.exported += 1

    def close(self) -> None:
        pass


class _Trace:
    def __init__(self, data: SessionData) -> None:
        self.data = data
        self.session = data.session
        self.trace_id = _id("trace", self.session.id, size=16)
        self.root_id = _id(self.session.id, "session", size=8)
        self.fallbacks: dict[str, str] = {}  # span id -> its parent when its own is missing

    def span_id(self, *key: object) -> str:
        return _id(self.session.id, *key, size=8)

    def spans(self, kept: list[Exchange]) -> list[dict[str, Any]]:
        end = self.session.ended_at or max(ex.ended_at or ex.started_at for ex in kept)
        root = self._span(self.root_id, None, f"invoke_agent {self.session.harness or 'agent'}",
                          INTERNAL, self.session.started_at, end, {
                              "gen_ai.operation.name": "invoke_agent",
                              "gen_ai.agent.name": self.session.harness,
                              "gen_ai.conversation.id": self.session.id,
                              "forge_record.exit_code": self.session.exit_code,
                              "forge_record.reward": self.data.reward})
        out = [root]
        self.kept_seqs = {ex.seq for ex in kept}
        parents = {}
        for thread in self.data.threads:
            mine = [ex for ex in kept if self.data.calls[ex.seq].thread == thread.id]
            if not mine:
                continue
            parents[thread.id] = self._thread_span(thread, mine, out)
            out += self._tool_spans(thread, mine, parents[thread.id])
        out += [self._call_span(ex, parents[self.data.calls[ex.seq].thread]) for ex in kept]
        self._adopt(out)
        return out

    def _adopt(self, spans: list[dict[str, Any]]) -> None:
        """A subagent's span sits under the `execute_tool` span of the tool call that spawned
        it (the spawning chat span ends when the model has asked, long before the subagent
        ends); without that span, under the spawner's thread, else the session."""
        ids = {s["spanId"] for s in spans}
        for span in spans:
            if span.get("parentSpanId") in ids:
                continue
            fallback = self.fallbacks.get(span["spanId"], self.root_id)
            span["parentSpanId"] = fallback if fallback in ids else self.root_id

    def _span(self, span_id, parent, name, kind, start, end, attrs, status=None) -> dict:
        span = {"traceId": self.trace_id, "spanId": span_id, "name": name, "kind": kind,
                "startTimeUnixNano": nanos(start), "endTimeUnixNano": nanos(end or start),
                "attributes": attributes(attrs)}
        if parent:
            span["parentSpanId"] = parent
        if status:
            span["status"] = status
        return span

    def _thread_span(self, thread: ThreadInfo, mine: list[Exchange], out: list) -> str:
        if thread.role == "main":
            return self.root_id
        span_id = self.span_id("thread", thread.id)
        parent = self.root_id
        if thread.spawned_by and thread.spawned_by[0] in self.kept_seqs:
            seq, call_id = thread.spawned_by
            parent = self.span_id("tool", seq, call_id)  # see _adopt
            spawner = self.data.calls[seq]
            self.fallbacks[span_id] = self.root_id if spawner.thread_role == "main" else \
                self.span_id("thread", spawner.thread)
        out.append(self._span(span_id, parent, f"invoke_agent {self.session.harness or 'agent'}",
                              INTERNAL, mine[0].started_at,
                              max(ex.ended_at or ex.started_at for ex in mine), {
                                  "gen_ai.operation.name": "invoke_agent",
                                  "gen_ai.agent.name": self.session.harness,
                                  "gen_ai.agent.id": thread.id,
                                  "gen_ai.conversation.id": self.session.id,
                                  "forge_record.thread.role": thread.role}))
        return span_id

    def _call_span(self, ex: Exchange, parent: str) -> dict[str, Any]:
        info = self.data.calls[ex.seq]
        operation = "generate_content" if ex.dialect.startswith("gemini") else "chat"
        failed = ex.status == ERROR
        status = {"code": STATUS_ERROR, "message": _error_text(ex)} if failed else None
        attrs = {"gen_ai.operation.name": operation,
                 "gen_ai.provider.name": PROVIDERS.get(ex.dialect, ex.dialect.partition(".")[0]),
                 "gen_ai.conversation.id": self.session.id, "gen_ai.agent.id": info.thread,
                 **_request_attrs(ex), **_response_attrs(ex, failed), **_server(ex.url),
                 "error.type": _error_type(ex) if failed else None,
                 "forge_record.seq": ex.seq, "forge_record.thread.id": info.thread,
                 "forge_record.segment": info.segment, "forge_record.call.role": info.role,
                 "forge_record.dialect": ex.dialect, "forge_record.status": ex.status}
        return self._span(self.span_id("call", ex.seq), parent,
                          f"{operation} {model_of(ex) or 'unknown'}", CLIENT, ex.started_at,
                          ex.ended_at, attrs, status)

    def _tool_spans(self, thread: ThreadInfo, mine: list[Exchange], parent: str) -> list[dict]:
        spans = []
        for ex, after in zip(mine, mine[1:], strict=False):
            asked = [b for b in (ex.response.content if ex.response else ())
                     if isinstance(b, ToolCall) and not b.server]
            answers = _results(after, len(ex.request.messages) if ex.request else 0)
            for call in asked:
                result = answers.get(call.id)
                if result is None:
                    continue
                status = {"code": STATUS_ERROR, "message": "tool error"} if result.is_error \
                    else None
                spans.append(self._span(
                    self.span_id("tool", ex.seq, call.id), parent, f"execute_tool {call.name}",
                    INTERNAL, ex.ended_at or ex.started_at, after.started_at, {
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                        "gen_ai.tool.call.id": call.id, "gen_ai.tool.type": "function",
                        "gen_ai.tool.call.arguments": dumps(part(call)["arguments"]),
                        "gen_ai.tool.call.result": _text(result_text(result))}, status))
        return spans


def _text(value: Any) -> str:
    return value if isinstance(value, str) else dumps(value)


def _results(ex: Exchange, skip: int) -> dict[str, ToolResult]:
    """Tool results in the messages a call added after the `skip` its predecessor had."""
    messages = ex.request.messages if ex.request else []
    return {b.tool_call_id: b for m in messages[skip:] for b in m.content
            if isinstance(b, ToolResult)}


def _request_attrs(ex: Exchange) -> dict[str, Any]:
    req = ex.request
    if req is None:
        return {}
    p = req.parameters
    return {
        "gen_ai.request.model": req.model,
        "gen_ai.request.stream": req.stream,
        "gen_ai.request.max_tokens": next((p[k] for k in ("max_tokens", "max_output_tokens",
                                                           "max_completion_tokens")
                                           if isinstance(p.get(k), int)), None),
        "gen_ai.request.temperature": _number(p.get("temperature")),
        "gen_ai.request.top_p": _number(p.get("top_p")),
        "gen_ai.system_instructions": dumps([part(b) for b in req.system]) if req.system
        else None,
        "gen_ai.input.messages": dumps([message(m) for m in req.messages]),
        "gen_ai.tool.definitions": dumps([tool_definition(t) for t in req.tools]) if req.tools
        else None,
    }


def _response_attrs(ex: Exchange, failed: bool) -> dict[str, Any]:
    resp = ex.response
    if resp is None:
        return {}
    u = resp.usage
    cached = (u.cache_read_tokens or 0) + (u.cache_write_tokens or 0)
    first = ex.first_byte_at - ex.started_at if ex.first_byte_at and ex.request \
        and ex.request.stream else None
    reason = finish_reason(resp.stop_reason, failed or ex.status != COMPLETE)
    return {
        "gen_ai.response.model": resp.model, "gen_ai.response.id": resp.id,
        "gen_ai.response.finish_reasons": [reason],
        "gen_ai.usage.input_tokens": None if u.input_tokens is None else u.input_tokens + cached,
        "gen_ai.usage.output_tokens": u.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": u.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": u.cache_write_tokens,
        "gen_ai.usage.reasoning.output_tokens": u.reasoning_tokens,
        "gen_ai.response.time_to_first_chunk": first,
        "gen_ai.output.messages": dumps([{"role": "assistant",
                                          "parts": [part(b, True) for b in resp.content],
                                          "finish_reason": reason}]),
    }


def _server(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80 if parts.scheme else None)
    return {"server.address": parts.hostname, "server.port": port if parts.hostname else None}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _error_type(ex: Exchange) -> str:
    error = ex.response.error if ex.response else None
    if isinstance(error, dict) and error.get("type"):
        return str(error["type"])
    return str(ex.http_status or "error")


def _error_text(ex: Exchange) -> str:
    error = ex.response.error if ex.response else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return f"{ex.status} (HTTP {ex.http_status})"
