"""Gemini responses: the fold of `GenerateContentResponse` chunks, and how they are framed.

Three framings carry the same chunks:

- SSE (`?alt=sse`, what the SDKs and Gemini CLI ask for): one chunk per `data:` event, framed
  and parsed by `forge_record.sse` like every dialect's stream. An error
  can arrive as plain, multi-line JSON with no `data:` prefix; such lines are buffered until
  their braces balance (outside strings), as python-genai does, and folded like any chunk.
- a JSON array (`streamGenerateContent` without `alt=sse`), and a single JSON object
  (`generateContent`, `countTokens`, error bodies): buffered and parsed at `finish()`; a
  truncated array still gives every element that arrived whole.

The fold: candidate 0's parts go through `PartFold`; `finishReason` becomes `stop_reason`;
`usageMetadata`, `modelVersion` and `responseId` take their last value; other top-level
fields and candidate fields go to `extras`, last value kept; further candidates (candidateCount
> 1) are kept verbatim in `extras["other_candidates"]`. A `{"error": {...}}` chunk sets
`Response.error`. Code Assist chunks (`{"response": {...}, "traceId": ...}`) are unwrapped
first; `traceId` is the id when the response has no `responseId`, as Gemini CLI does.

Usage: `input_tokens` = promptTokenCount - cachedContentTokenCount + toolUsePromptTokenCount
(uncached prompt, as Anthropic counts it); `cache_read_tokens` = cachedContentTokenCount;
`output_tokens` = candidatesTokenCount + thoughtsTokenCount (thinking is output that is
billed, as Anthropic and OpenAI count it); `reasoning_tokens` = thoughtsTokenCount.

`complete` means a `finishReason` arrived and the body ended (for a single JSON object: that it
parsed). The fold never raises on a chunk of a bad shape: it is kept in
`extras["undecoded_events"]`; a body that is not JSON at all raises `DecodeError` at `finish()`.
"""

from __future__ import annotations

from typing import Any

import orjson

from forge_record.decoders.base import SHAPE_ERRORS, BufferedBody
from forge_record.decoders.gemini_parts import PartFold
from forge_record.errors import DecodeError
from forge_record.records import Response, Usage
from forge_record.sse import LineFramer, ServerSentEvent, SSEDecoder, lines_of

_RESPONSE_OWN = {"candidates", "usageMetadata", "modelVersion", "responseId"}
_CANDIDATE_OWN = {"content", "finishReason", "index"}


def usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt, cached = raw.get("promptTokenCount"), raw.get("cachedContentTokenCount")
    answer, thoughts = raw.get("candidatesTokenCount"), raw.get("thoughtsTokenCount")
    tool_prompt = raw.get("toolUsePromptTokenCount") or 0
    output = None if answer is None and thoughts is None else (answer or 0) + (thoughts or 0)
    return Usage(
        input_tokens=None if prompt is None else prompt - (cached or 0) + tool_prompt,
        output_tokens=output,
        cache_read_tokens=cached,
        reasoning_tokens=thoughts,
        raw=raw,
    )


class ResponseFold:
    def __init__(self, wrapped: bool) -> None:
        self._wrapped = wrapped  # Code Assist: chunks carry the response in "response"
        self._parts = PartFold()
        self._fields: dict[str, Any] = {}  # responseId, modelVersion, usageMetadata, ...
        self._extras: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.error: dict[str, Any] | None = None

    def add(self, chunk: Any) -> None:
        try:
            self._add(chunk)
        except SHAPE_ERRORS:  # kept aside, applied no further
            self._extras.setdefault("undecoded_events", []).append(chunk)

    def _add(self, chunk: dict[str, Any]) -> None:
        if not isinstance(chunk, dict):
            raise TypeError("a chunk is not a JSON object")
        if "error" in chunk:
            self.error = chunk["error"] if isinstance(chunk["error"], dict) else {"message":
                                                                                 chunk["error"]}
            return
        if self._wrapped and isinstance(chunk.get("response"), dict):
            wrapper = {k: v for k, v in chunk.items() if k != "response"}
            self._extras["code_assist"] = wrapper
            self._fields.setdefault("traceId", wrapper.get("traceId"))
            chunk = chunk["response"]
        for candidate in chunk.get("candidates") or ():
            self._add_candidate(candidate)
        for key, value in chunk.items():
            if value is None or key == "candidates":
                continue
            (self._fields if key in _RESPONSE_OWN else self._extras)[key] = value

    def _add_candidate(self, candidate: dict[str, Any]) -> None:
        if candidate.get("index", 0) != 0:
            self._extras.setdefault("other_candidates", []).append(candidate)
            return
        for part in (candidate.get("content") or {}).get("parts") or ():
            self._parts.add(part)
        if candidate.get("finishReason"):
            self.stop_reason = candidate["finishReason"]
        rest = {k: v for k, v in candidate.items() if k not in _CANDIDATE_OWN}
        if rest:
            self._extras.setdefault("candidate", {}).update(rest)

    def response(self) -> Response:
        fields = self._fields
        return Response(
            id=fields.get("responseId") or fields.get("traceId"),
            model=fields.get("modelVersion"),
            content=self._parts.blocks(),
            stop_reason=self.stop_reason,
            usage=usage(fields.get("usageMetadata")),
            error=self.error,
            extras=self._extras,
        )


class ObjectScanner:
    """Finds whole top-level JSON objects in text that arrives in pieces, by counting braces
    outside strings. What lies between objects (`[`, `,`, `]`, blanks) is skipped."""

    def __init__(self) -> None:
        self._current: list[str] = []
        self._depth = 0
        self._in_string = False
        self._escaped = False

    @property
    def open(self) -> bool:
        return self._depth > 0

    def feed(self, text: str) -> list[str]:
        found, start = [], 0 if self._depth else None
        for i, c in enumerate(text):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif c == "\\":
                    self._escaped = True
                elif c == '"':
                    self._in_string = False
            elif c == '"' and self._depth:
                self._in_string = True
            elif c == "{":
                if self._depth == 0:
                    start = i
                self._depth += 1
            elif c == "}" and self._depth:
                self._depth -= 1
                if self._depth == 0:
                    found.append("".join(self._current) + text[start:i + 1])
                    self._current, start = [], None
        if start is not None:
            self._current.append(text[start:])
        return found


def _may_start_raw_json(block: bytes) -> bool:
    """Whether a line of `block` starts with "{" or "[" (a few substring searches in C)."""
    return (block[:1] in (b"{", b"[") or b"\n{" in block or b"\r{" in block
            or b"\n[" in block or b"\r[" in block)


def _parse(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text  # not an object: the fold keeps it aside, verbatim


class StreamDecoder:
    """Gemini SSE: `data:` events, plus raw JSON lines (errors) between them. Lines are framed
    by `forge_record.sse` as every dialect's are; the SSE lines among them are parsed there
    too, the raw JSON ones go to an `ObjectScanner`."""

    def __init__(self, wrapped: bool) -> None:
        self._fold = ResponseFold(wrapped)
        self._framer = LineFramer()
        self._events = SSEDecoder()
        self._raw = ObjectScanner()
        self._complete = False

    @property
    def complete(self) -> bool:
        return self._complete

    def feed(self, chunk: bytes) -> None:
        self._block(self._framer.feed(chunk))

    def finish(self) -> Response:
        self._block(self._framer.flush())
        self._add(self._events.flush())
        self._complete = self._fold.stop_reason is not None
        return self._fold.response()

    def _block(self, block: bytes) -> None:
        if not block:
            return
        if self._raw.open or _may_start_raw_json(block):
            self._lines(lines_of(block))
        else:  # the usual block, SSE lines only: parsed as any dialect's, fast paths included
            self._add(self._events.block(block))

    def _lines(self, lines: list[str]) -> None:
        """Route each line: into a JSON object being scanned, or one starting where no event
        is being built, else to the SSE parser (a run of such lines in one call)."""
        run: list[str] = []
        for line in lines:
            if self._raw.open or line[:1] in ("{", "["):
                if run:  # applied first: whether an event is pending decides the line's way
                    self._add(self._events.lines(run))
                    run = []
                if self._raw.open or not self._events.pending:
                    for text in self._raw.feed(line + "\n"):
                        self._fold.add(_parse(text))
                    continue
            run.append(line)
        if run:
            self._add(self._events.lines(run))

    def _add(self, events: list[ServerSentEvent]) -> None:
        # Only the data counts: Gemini names no events, and ids and retry carry nothing here.
        for event in events:
            self._fold.add(_parse(event.data))


class BodyDecoder(BufferedBody):
    """A JSON object, or a JSON array of chunks, buffered and parsed at finish."""

    def __init__(self, wrapped: bool) -> None:
        super().__init__()
        self._fold = ResponseFold(wrapped)

    def finish(self) -> Response:
        body = self.body
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            if body.lstrip()[:1] != b"[":
                raise DecodeError(f"response body is not JSON: {e}") from e
            salvaged = ObjectScanner().feed(body.decode("utf-8", "replace"))
            for text in salvaged:  # a cut array: the whole elements that arrived
                self._fold.add(_parse(text))
            return self._fold.response()
        if isinstance(data, dict):
            self._fold.add(data)
            self._complete = True
        elif isinstance(data, list):
            for item in data:
                self._fold.add(item)
            self._complete = self._fold.stop_reason is not None
        else:
            raise DecodeError("response body is not a JSON object or array")
        return self._fold.response()
