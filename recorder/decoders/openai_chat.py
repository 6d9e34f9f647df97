"""The OpenAI Chat Completions dialect: `POST …/chat/completions`, from OpenAI or any
compatible server (vLLM, SGLang, Ollama, LM Studio, gateways), SSE or JSON.

Requests: a leading run of `system`/`developer` messages is the system prompt; every other
message keeps its place and role. Assistant messages read like responses (below); `tool`
messages (and legacy `function` ones) become "tool" Messages holding a ToolResult. `tools`
(and legacy `functions`) become Tools; every other top-level field goes to `parameters`.

Responses: a JSON body and a stream fold into the same Response for the same completion.
The stream fold follows the SDK's accumulator where it is sane: content, refusal and
reasoning strings grow by concatenation, tool calls by their `index` (interleaved fragments
of parallel calls included), legacy `function_call` likewise, logprob lists are extended,
other delta fields are merged (strings joined, lists extended). Where the SDK would
concatenate a repeated tool-call `id`, `type` or `name` (some servers resend them in every
fragment), the first non-empty value is kept. Usage is the last non-null `usage` seen (the
`choices: []` chunk with `include_usage`; some servers send it on every chunk).
`obfuscation` padding is dropped. `[DONE]` completes the stream; a `{"error": ...}` payload
(or an `event: error`) sets Response.error.

Mapping (docs/records.md): choice 0 (the lowest index) is the Response's content; other
choices (n > 1) go to `extras["choices"]` as `{index, content, finish_reason, logprobs}`.
Content order: Reasoning (`reasoning_content`, else vLLM's `reasoning`; never both), Text
(message `annotations` as citations), refusal as Other `{"type": "refusal", ...}`, tool
calls (ToolCall; arguments parsed at the end, raw kept, parse_error when not JSON; a legacy
`function_call` has id ""). `stop_reason` = finish_reason. Usage `input_tokens` =
`prompt_tokens` - `prompt_tokens_details.cached_tokens`. Choice logprobs ->
`extras["logprobs"]`; other non-empty message fields -> `extras["message"]`; other
top-level fields (`created`, `system_fingerprint`, `service_tier`, ...) -> extras.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from forge_record.decoders.base import (
    SHAPE_ERRORS,
    Dialect,
    JsonBodyDecoder,
    Reused,
    decode_object,
    is_event_stream,
)
from forge_record.decoders.openai_chat_fold import ChatFold
from forge_record.decoders.openai_items import (
    content_blocks,
    function_call,
    media,
    refusal,
    token_usage,
)
from forge_record.records import (
    Block,
    Message,
    Other,
    Reasoning,
    Request,
    Response,
    Text,
    Tokens,
    Tool,
    ToolCall,
    ToolResult,
    Usage,
    block_to_dict,
)
from forge_record.sse import SSEDecoder

_REQUEST_OWN_FIELDS = {"model", "messages", "tools", "functions", "stream"}
_TOP_OWN_FIELDS = {"id", "model", "choices", "usage", "object", "obfuscation", "error"}
_MESSAGE_OWN_FIELDS = {"role", "content", "refusal", "reasoning_content", "reasoning",
                       "tool_calls", "function_call", "annotations"}
_SYSTEM_ROLES = {"system", "developer"}


# --- messages as blocks (requests and responses) -----------------------------------------


def _part(part: dict[str, Any]) -> Block:
    kind = part.get("type")
    if kind == "image_url":
        image = part.get("image_url")
        return media("image", image.get("url") if isinstance(image, dict) else image)
    if kind == "file":
        file = part.get("file") or {}
        return media("document", file.get("file_data") or file.get("file_id"))
    return content_blocks([part])[0]  # text, refusal, and Other for the rest


def _content(content: Any) -> list[Block]:
    if isinstance(content, list):
        return [_part(p) for p in content]
    return content_blocks(content)


def _tool_call(raw: dict[str, Any]) -> Block:
    if raw.get("type", "function") == "function":
        fn = raw.get("function") or {}
        return function_call(raw.get("id"), fn.get("name"), fn.get("arguments"))
    if raw.get("type") == "custom":  # freeform input, like the Responses custom tools
        custom = raw.get("custom") or {}
        return ToolCall(id=raw.get("id") or "", name=custom.get("name") or "",
                        arguments_raw=custom.get("input") or "")
    return Other(data=raw)


def message_blocks(msg: dict[str, Any]) -> list[Block]:
    blocks: list[Block] = []
    # OpenAI-compatible servers: DeepSeek/older vLLM say reasoning_content, newer vLLM and
    # OpenRouter say reasoning; a server in transition may send both with the same text.
    thought = msg.get("reasoning_content") or msg.get("reasoning")
    if isinstance(thought, str) and thought:
        blocks.append(Reasoning(text=thought))
    text_blocks = _content(msg.get("content"))
    if msg.get("annotations") and len(text_blocks) == 1 and isinstance(text_blocks[0], Text):
        text_blocks[0].citations = msg["annotations"]
    blocks += text_blocks
    if msg.get("refusal"):
        blocks.append(refusal(msg["refusal"]))
    blocks += [_tool_call(tc) for tc in msg.get("tool_calls") or ()]
    legacy = msg.get("function_call")
    if isinstance(legacy, dict):
        blocks.append(function_call("", legacy.get("name"), legacy.get("arguments")))
    return blocks


# --- requests ----------------------------------------------------------------------------


def _tool(raw: dict[str, Any]) -> Tool:
    kind = raw.get("type") or "function"
    if kind == "function":
        fn = raw.get("function") or {}
        return Tool(name=fn.get("name") or "", description=fn.get("description"),
                    parameters=fn.get("parameters"))
    if kind == "custom":
        custom = raw.get("custom") or {}
        return Tool(kind="custom", name=custom.get("name") or "",
                    description=custom.get("description"), parameters=custom.get("format"))
    rest = {k: v for k, v in raw.items() if k not in ("type", "name")}
    return Tool(kind=kind, name=raw.get("name") or kind, parameters=rest or None)


def _legacy_function(raw: dict[str, Any]) -> Tool:
    return Tool(name=raw.get("name") or "", description=raw.get("description"),
                parameters=raw.get("parameters"))


def _message(msg: dict[str, Any]) -> Message:
    role = msg.get("role") or "user"
    if role == "assistant":
        return Message(role=role, content=message_blocks(msg))
    if role in ("tool", "function"):
        result = ToolResult(tool_call_id=msg.get("tool_call_id") or "",
                            content=_content(msg.get("content")),
                            name=msg.get("name") if role == "function" else None)
        return Message(role="tool", content=[result])
    return Message(role=role, content=_content(msg.get("content")))


_TOOLS = Reused(_tool)


def parse_chat_request(data: dict[str, Any]) -> Request:
    messages = list(data.get("messages") or ())
    lead = next((i for i, m in enumerate(messages) if m.get("role") not in _SYSTEM_ROLES),
                len(messages))
    return Request(
        model=data.get("model"),
        system=[b for m in messages[:lead] for b in _content(m.get("content"))],
        tools=_TOOLS(data.get("tools") or [])
        + [_legacy_function(f) for f in data.get("functions") or ()],
        messages=[_message(m) for m in messages[lead:]],
        stream=bool(data.get("stream")),
        parameters={k: v for k, v in data.items() if k not in _REQUEST_OWN_FIELDS},
    )


# --- responses ---------------------------------------------------------------------------


def chat_usage(raw: Any) -> Usage:
    return token_usage(raw, "prompt_tokens", "completion_tokens")


def _non_empty(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v not in (None, "", [], {})}


def completion_response(obj: dict[str, Any]) -> Response:
    """A ChatCompletion object (a JSON body, or the stream's snapshot) as a Response."""
    choices = sorted(obj.get("choices") or (), key=lambda c: c.get("index") or 0)
    extras = {k: v for k, v in obj.items() if k not in _TOP_OWN_FIELDS and v is not None}
    response = Response(id=obj.get("id"), model=obj.get("model"),
                        usage=chat_usage(obj.get("usage")), extras=extras)
    if not choices:
        return response
    first, *others = choices
    message = first.get("message") or {}
    response.content = message_blocks(message)
    response.stop_reason = first.get("finish_reason")
    logprobs = _non_empty(first.get("logprobs") or {})
    if (tokens := engine_tokens(obj, first)) is not None:
        response.tokens = tokens
        extras.pop("prompt_token_ids", None)
        if tokens.logprobs is not None:  # the entries live on in tokens, once
            logprobs.pop("content", None)
    if logprobs:
        extras["logprobs"] = logprobs
    if first.get("stop_reason") is not None:  # vLLM: the stop string or token id that matched
        extras["stop_reason"] = first["stop_reason"]
    if rest := _non_empty({k: v for k, v in message.items() if k not in _MESSAGE_OWN_FIELDS}):
        extras["message"] = rest
    if others:
        extras["choices"] = [_other_choice(c) for c in others]
    return response


def engine_tokens(obj: dict[str, Any], choice: dict[str, Any]) -> Tokens | None:
    """The engine's token ids and logprobs for a choice, or None when it sent no ids. Prompt
    ids sit at the top level in vLLM's chat answers and inside the choice in SGLang's chat
    and in completions. Chat logprob entries carry no token id: they line up with `ids`."""
    ids = choice.get("token_ids")
    prompt_ids = choice.get("prompt_token_ids", obj.get("prompt_token_ids"))
    if ids is None and prompt_ids is None:
        return None
    tokens = Tokens(prompt_ids=prompt_ids, ids=ids)
    entries = (choice.get("logprobs") or {}).get("content")
    if entries:
        tokens.logprobs = [e.get("logprob") for e in entries]
        if any(e.get("top_logprobs") for e in entries):
            tokens.top_logprobs = [[[t.get("token"), t.get("logprob")]
                                    for t in e.get("top_logprobs") or ()] for e in entries]
    return tokens


def _other_choice(choice: dict[str, Any]) -> dict[str, Any]:
    out = {"index": choice.get("index"),
           "content": [block_to_dict(b) for b in message_blocks(choice.get("message") or {})],
           "finish_reason": choice.get("finish_reason")}
    if logprobs := _non_empty(choice.get("logprobs") or {}):
        out["logprobs"] = logprobs
    return out


def _body_response(data: dict[str, Any]) -> Response:
    if isinstance(data.get("error"), dict) and "choices" not in data:  # an error body
        return Response(error=data["error"], extras={k: v for k, v in data.items()
                                                     if k != "error"})
    return completion_response(data)


class FoldedStream:
    """SSE framing around a fold of OpenAI-style chunks (chat's ChatFold, completions'
    CompletionsFold): each `data:` chunk is applied to `fold`, `build` turns the fold's
    snapshot into the Response, and `[DONE]` completes the stream."""

    def __init__(self, fold: Any, build: Callable[[dict[str, Any]], Response]) -> None:
        self._sse = SSEDecoder()
        self._fold = fold
        self._build = build
        self._error: dict[str, Any] | None = None
        self._extras: dict[str, Any] = {}
        self._done = False

    @property
    def complete(self) -> bool:
        return self._done

    def feed(self, chunk: bytes) -> None:
        for event in self._sse.feed(chunk):
            self._on_event(event.event, event.data)

    def finish(self) -> Response:
        for event in self._sse.flush():
            self._on_event(event.event, event.data)
        try:
            response = self._build(self._fold.snapshot())
        except SHAPE_ERRORS:  # a value of the wrong shape: the raw body still has it all
            response = Response()
            self._keep("undecoded_events", {"error": "chunks folded into an unusable shape"})
        response.error = self._error
        response.extras.update(self._extras)
        return response

    def _keep(self, key: str, item: Any) -> None:
        self._extras.setdefault(key, []).append(item)

    def _on_event(self, name: str | None, data: str) -> None:
        if data.startswith("[DONE]"):  # as the SDK tests it
            self._done = True
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            chunk = None
        if name == "error" or isinstance(chunk, dict) and chunk.get("error"):
            # An error inside a 200 stream: the completion is not whole.
            error = chunk.get("error") if isinstance(chunk, dict) else None
            self._error = error if isinstance(error, dict) else {"message": data}
            return
        try:
            self._fold.apply(chunk)
        except SHAPE_ERRORS:  # not JSON, or JSON of an unexpected shape: kept aside
            self._keep("undecoded_events", {"event": name, "data": data})


class OpenAIChat(Dialect):
    name = "openai.chat"
    routes = {"/chat/completions": "model"}
    body_keys = (b'"messages"',)

    def parse_request(self, body: bytes) -> Request:
        return decode_object(body, "request body", parse_chat_request, grows="messages")

    def response_decoder(self, content_type: str) -> FoldedStream | JsonBodyDecoder:
        if is_event_stream(content_type):
            return FoldedStream(ChatFold(), completion_response)
        return JsonBodyDecoder(_body_response)


DIALECT = OpenAIChat()
