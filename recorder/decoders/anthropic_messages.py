"""The Anthropic Messages dialect: `POST /v1/messages` (`?beta=true` too) and count_tokens.

Requests: `system`, `tools` and `messages` become normalized blocks; `model` and `stream`
have their own fields; every other top-level field lands in `parameters` untouched.
`cache_control` markers are dropped from blocks (they move between turns; the raw body keeps
them), and image/document bytes are named by sha256 and size, never copied.

Responses: a whole JSON body or an SSE stream fold into the same `Response` for the same
message. The stream fold mirrors the SDK's `accumulate_event`: `message_start` seeds a
snapshot, blocks grow by their deltas, tool input JSON is joined and parsed at
`content_block_stop`, and `message_delta` overwrites fields and cumulative usage with its
non-null values (never sums). `arguments_raw` of a parsed tool call is its input re-dumped by
orjson, so both paths agree; input that does not parse keeps the raw text and `parse_error`.

Tolerance: the fold never raises. An event it cannot apply (bad JSON, a delta for a block
that does not exist) is kept verbatim in `extras["undecoded_events"]`; an unknown but
well-formed event type in `extras["unknown_events"]`. Events before `message_start` are
applied to an empty snapshot, so partial data survives. A whole body that is not a JSON
object raises `DecodeError`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections import deque
from typing import Any

import orjson

from forge_record.decoders.base import (
    SHAPE_ERRORS,
    Dialect,
    JsonBodyDecoder,
    Reused,
    decode_object,
    is_event_stream,
    same_json,
)
from forge_record.records import (
    Block,
    Media,
    Message,
    Other,
    Reasoning,
    Request,
    Response,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    Usage,
)
from forge_record.shared_ends import shared_prefix
from forge_record.sse import ServerSentEvent, SSEDecoder

_TOOL_CALLS = {"tool_use": False, "server_tool_use": True, "mcp_tool_use": True}  # -> server
_REQUEST_OWN_FIELDS = {"model", "system", "tools", "messages", "stream"}
_MESSAGE_OWN_FIELDS = {"id", "type", "role", "model", "content", "stop_reason", "usage"}


# --- blocks (shared by requests, JSON bodies and streams) --------------------------------


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _block(raw: dict[str, Any]) -> Block:
    kind = raw.get("type")
    if kind == "text":
        return Text(text=raw.get("text", ""), citations=raw.get("citations") or None)
    if kind == "thinking":
        return Reasoning(text=raw.get("thinking", ""), signature=raw.get("signature") or None)
    if kind == "redacted_thinking":
        return Reasoning(encrypted=raw.get("data"))
    if kind in _TOOL_CALLS:
        args = raw.get("input")
        return ToolCall(id=raw.get("id", ""), name=raw.get("name", ""), arguments=args,
                        arguments_raw=_dumps(args), server=_TOOL_CALLS[kind])
    if kind == "tool_result":
        return ToolResult(tool_call_id=raw.get("tool_use_id", ""),
                          content=_blocks(raw.get("content")), is_error=bool(raw.get("is_error")))
    if isinstance(kind, str) and kind.endswith("_tool_result"):
        return _server_tool_result(kind, raw)
    if kind in ("image", "document"):
        return _media(kind, raw.get("source") or {})
    return Other(data={k: v for k, v in raw.items() if k != "cache_control"})


def _blocks(content: Any) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [Text(text=content)] if content else []
    return [_block(b) for b in content]


def _server_tool_result(kind: str, raw: dict[str, Any]) -> ToolResult:
    """web_search_tool_result and kin: the API ran the tool; its output is kept as is."""
    content = raw.get("content")
    failed = isinstance(content, dict) and str(content.get("type", "")).endswith("_error")
    return ToolResult(tool_call_id=raw.get("tool_use_id", ""), name=kind,
                      content=[Other(data=content)], is_error=failed or bool(raw.get("is_error")))


def _media(kind: str, source: dict[str, Any]) -> Media:
    media_type, url = source.get("media_type"), source.get("url")
    if source.get("type") == "base64":
        payload = _b64(source.get("data", ""))
    elif source.get("type") == "text":
        payload = str(source.get("data", "")).encode()
    elif source.get("type") == "content":
        payload = orjson.dumps(source.get("content"))
    else:  # url or file: the bytes are elsewhere, so the reference is what gets named
        ref = url or source.get("file_id") or ""
        return Media(type=kind, media_type=media_type, url=url,
                     sha256=hashlib.sha256(ref.encode()).hexdigest() if ref else None)
    return Media(type=kind, media_type=media_type, size=len(payload),
                 sha256=hashlib.sha256(payload).hexdigest())


def _b64(data: str) -> bytes:
    try:
        return base64.b64decode(data)
    except (binascii.Error, ValueError):
        return data.encode()  # still names the content, if not the decoded bytes


# --- requests ----------------------------------------------------------------------------


def _tool(raw: dict[str, Any]) -> Tool:
    kind = raw.get("type")
    if kind in (None, "custom"):
        return Tool(name=raw.get("name", ""), description=raw.get("description"),
                    parameters=raw.get("input_schema"))
    rest = {k: v for k, v in raw.items() if k not in ("type", "name", "cache_control")}
    return Tool(kind=kind, name=raw.get("name", ""), parameters=rest or None)


# The message dicts of the last few requests parsed, with the records built from them. An
# agent loop resends its whole history on every call, so nearly every message of a request
# was in one of the requests just before; dicts written alike make equal records, and
# records are not changed in place once built (see store.content.Decoded), so those are
# reused. A comparison of dicts costs a fraction of building the records again.
_RECENT: deque[tuple[list[Any], list[Message]]] = deque(maxlen=8)
_RECENT_LOCK = threading.Lock()


def _messages(raw: list[Any]) -> list[Message]:
    with _RECENT_LOCK:
        recent = list(_RECENT)
    reused: list[Message] = []
    for old_raw, old_messages in reversed(recent):  # the newest first
        if old_raw and raw and old_raw[0] == raw[0]:
            # identical objects when decoders.repeats shared them: one compare in C
            shared = shared_prefix(raw, old_raw)
            # and equal as JSON, not only as Python values (1 == 1.0 == True)
            shared = next((i for i in range(shared) if not same_json(old_raw[i], raw[i])),
                          shared)
            reused = old_messages[:shared]
            break
    messages = reused + [Message(role=m["role"], content=_blocks(m.get("content")))
                         for m in raw[len(reused):]]
    if raw:
        with _RECENT_LOCK:
            _RECENT.append((raw, messages))
    return messages


_SYSTEM = Reused(_block)
_TOOLS = Reused(_tool)


def _parse_request(data: dict[str, Any]) -> Request:
    system = data.get("system")
    return Request(
        model=data.get("model"),
        system=_SYSTEM(system) if isinstance(system, list) else _blocks(system),
        tools=_TOOLS(data.get("tools") or []),
        messages=_messages(data.get("messages") or []),
        stream=bool(data.get("stream")),
        parameters={k: v for k, v in data.items() if k not in _REQUEST_OWN_FIELDS},
    )


# --- responses ---------------------------------------------------------------------------


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    details = raw.get("output_tokens_details")
    return Usage(
        input_tokens=raw.get("input_tokens"),
        output_tokens=raw.get("output_tokens"),
        cache_read_tokens=raw.get("cache_read_input_tokens"),
        cache_write_tokens=raw.get("cache_creation_input_tokens"),
        reasoning_tokens=details.get("thinking_tokens") if isinstance(details, dict) else None,
        raw=raw,
    )


def _message_response(msg: dict[str, Any], content: list[Block]) -> Response:
    """A Message object (a JSON body, or the stream's snapshot) as a Response. Fields the
    record has no place for (stop_sequence, stop_details, container, ...) go to extras."""
    extras = {k: v for k, v in msg.items() if k not in _MESSAGE_OWN_FIELDS and v is not None}
    return Response(id=msg.get("id"), model=msg.get("model"), content=content,
                    stop_reason=msg.get("stop_reason"), usage=_usage(msg.get("usage")),
                    extras=extras)


def _body_response(data: dict[str, Any]) -> Response:
    if data.get("type") == "error":
        extras = {k: v for k, v in data.items() if k not in ("type", "error")}
        return Response(error=data.get("error"), extras=extras)
    return _message_response(data, [_block(b) for b in data.get("content") or ()])


class _StreamDecoder:
    """The SSE fold. Text, thinking and tool JSON grow as lists of fragments joined once,
    so a long answer costs linear time."""

    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self._message: dict[str, Any] = {}  # the snapshot, content kept apart in _blocks
        self._blocks: list[dict[str, Any]] = []
        self._fragments: dict[int, list[str]] = {}  # open block index -> its deltas so far
        self._bad_json: dict[int, str] = {}  # tool block index -> input that did not parse
        self._error: dict[str, Any] | None = None
        self._extras: dict[str, Any] = {}
        self._complete = False

    @property
    def complete(self) -> bool:
        return self._complete

    def feed(self, chunk: bytes) -> None:
        for event in self._sse.feed(chunk):
            self._on_event(event)

    def finish(self) -> Response:
        for event in self._sse.flush():
            self._on_event(event)
        for index in list(self._fragments):  # the stream stopped inside these blocks
            self._close_block(index)
        response = _message_response(self._message, [self._content(i) for i in
                                                     range(len(self._blocks))])
        response.error = self._error
        response.extras.update(self._extras)
        return response

    def _keep(self, key: str, item: Any) -> None:
        self._extras.setdefault(key, []).append(item)

    def _on_event(self, sse: ServerSentEvent) -> None:
        try:
            data = orjson.loads(sse.data)
        except orjson.JSONDecodeError:
            data = None
        if sse.event == "error" and not isinstance(data, dict):
            data = {"error": {"message": sse.data}}  # a gateway's plain-text error is one too
        try:
            kind = "error" if sse.event == "error" else data.get("type") or sse.event
            handler = _HANDLERS.get(kind)
            if handler is None:
                self._keep("unknown_events", data)
            else:
                handler(self, data)
        except SHAPE_ERRORS:  # JSON of an unexpected shape: kept aside, applied no further
            self._keep("undecoded_events", {"event": sse.event, "data": sse.data})

    def _index(self, data: dict[str, Any]) -> int:
        index = data["index"]
        if not 0 <= index < len(self._blocks):
            raise IndexError(f"no content block {index}")
        return index

    def _on_message_start(self, data: dict[str, Any]) -> None:
        message = dict(data["message"])
        self._blocks.extend(b for b in message.pop("content", None) or () if isinstance(b, dict))
        self._message.update(message)

    def _on_block_start(self, data: dict[str, Any]) -> None:
        self._blocks.append(dict(data["content_block"]))

    def _on_block_delta(self, data: dict[str, Any]) -> None:
        # Most events of a stream come here: _index() is inlined, the common case first.
        index, delta = data["index"], data["delta"]
        if not 0 <= index < len(self._blocks):
            raise IndexError(f"no content block {index}")
        block, kind = self._blocks[index], delta["type"]
        targets = _DELTA_TARGETS.get(kind)
        if targets is None:
            self._keep("unknown_events", data)
        elif block.get("type") not in targets:
            pass  # like the SDK: a delta for another kind of block is dropped
        elif (grows := _GROWS.get(kind)) is not None:
            fragment = delta[grows]
            if not isinstance(fragment, str):
                raise TypeError("fragment is not a string")
            fragments = self._fragments.get(index)
            if fragments is None:
                fragments = self._fragments[index] = []
            fragments.append(fragment)
        elif kind == "signature_delta":
            block["signature"] = delta["signature"]  # replaces: it is not streamed in parts
        else:  # citations_delta
            block["citations"] = [*(block.get("citations") or ()), delta["citation"]]

    def _on_block_stop(self, data: dict[str, Any]) -> None:
        self._close_block(self._index(data))

    def _on_message_delta(self, data: dict[str, Any]) -> None:
        # Counts are cumulative and optional ones may be left out, so the latest non-null
        # value wins; summing would double-count.
        self._merge(self._message, data.get("delta") or {})
        usage = self._message.setdefault("usage", {})
        self._message["usage"] = self._merge(dict(usage), data.get("usage") or {})
        self._merge(self._message, {k: v for k, v in data.items()
                                    if k not in ("type", "delta", "usage")})

    @staticmethod
    def _merge(target: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
        target.update((k, v) for k, v in update.items() if v is not None)
        return target

    def _on_stop(self, data: dict[str, Any]) -> None:
        self._complete = True

    def _on_error(self, data: dict[str, Any]) -> None:
        # An error event ends a 200 stream early: the message is not complete, so
        # `complete` stays False and Response.error carries what went wrong.
        self._error = data.get("error", data)
        if "request_id" in data:
            self._extras["request_id"] = data["request_id"]

    def _close_block(self, index: int) -> None:
        """Join the block's fragments into it; parse tool input, as content_block_stop does."""
        fragments = self._fragments.pop(index, None)
        if fragments is None:
            return
        block, joined = self._blocks[index], "".join(fragments)
        if block.get("type") not in _TOOL_CALLS:
            field = "text" if block.get("type") == "text" else "thinking"
            start = block.get(field)
            block[field] = (start if isinstance(start, str) else "") + joined
        elif joined:  # the SDK also keeps the start block's input when no JSON came
            try:
                block["input"] = orjson.loads(joined)
            except orjson.JSONDecodeError:
                self._bad_json[index] = joined

    def _content(self, index: int) -> Block:
        try:
            block = _block(self._blocks[index])
        except SHAPE_ERRORS:  # a block of the wrong shape is still kept, verbatim
            return Other(data=self._blocks[index])
        raw = self._bad_json.get(index)
        if raw is not None:
            block.arguments, block.arguments_raw, block.parse_error = None, raw, True
        return block


_DELTA_TARGETS = {  # delta type -> the block types it applies to
    "text_delta": ("text",),
    "citations_delta": ("text",),
    "thinking_delta": ("thinking",),
    "signature_delta": ("thinking",),
    "input_json_delta": tuple(_TOOL_CALLS),
}
_GROWS = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}
_HANDLERS = {
    "message_start": _StreamDecoder._on_message_start,
    "content_block_start": _StreamDecoder._on_block_start,
    "content_block_delta": _StreamDecoder._on_block_delta,
    "content_block_stop": _StreamDecoder._on_block_stop,
    "message_delta": _StreamDecoder._on_message_delta,
    "message_stop": _StreamDecoder._on_stop,
    "error": _StreamDecoder._on_error,
    "ping": lambda self, data: None,  # a keep-alive
}


# --- the dialect -------------------------------------------------------------------------


class AnthropicMessages(Dialect):
    name = "anthropic.messages"
    routes = {"/v1/messages": "model", "/v1/messages/count_tokens": "side"}

    def parse_request(self, body: bytes) -> Request:
        return decode_object(body, "request body", _parse_request, grows="messages")

    def response_decoder(self, content_type: str) -> _StreamDecoder | JsonBodyDecoder:
        if is_event_stream(content_type):
            return _StreamDecoder()
        return JsonBodyDecoder(_body_response)


DIALECT = AnthropicMessages()
