"""Anthropic Messages <-> Chat Completions, for Claude Code against an engine.

Request (docs/ENGINES.md has the table): `system` (a string or text blocks, joined by "\\n")
is the system message; a user message's `tool_result` blocks become `tool` messages, in order,
before the user message holding its other blocks (Chat wants tool answers right after the
call); `is_error` is kept as an "Error: " prefix; images (base64 or URL) become `image_url`
parts (an image inside a tool result moves to the user message after it: tool messages hold
text only). An assistant message's text is its `content`, its `thinking` its `reasoning`,
its `tool_use` blocks `tool_calls` (ids kept, input dumped as the arguments string).
`max_tokens`, `temperature`, `top_p`, `top_k`, `stop_sequences` (-> `stop`), `tool_choice`
(auto/any/tool/none -> auto/required/function/none, `disable_parallel_tool_use` ->
`parallel_tool_calls: false`), custom tools, and a JSON-schema `output_config.format` (->
`response_format`) carry over. Hints the engine has no use for (`cache_control`,
`metadata`, `thinking`, `output_config.effort`, `context_management`, `service_tier`, ...)
are dropped. Server tools,
MCP servers, documents and any block or field not named here are `Untranslatable`.

Answer: `message_start` on the engine's first chunk, its `input_tokens` the length of the
prompt ids that chunk carries (the framework asks for them; absent, 0 until `message_delta`
gives the usage chunk's count: the SDK's accumulator takes a non-null `input_tokens` there).
Reasoning deltas (`reasoning_content`, or vLLM's `reasoning`) open a `thinking` block with
an empty `signature` (there is none to give, and the SDK's model accepts the empty string),
content deltas a `text` block, each tool call a `tool_use` block whose arguments stream as
`input_json_delta`; a block is stopped when another starts or the choice finishes.
`message_delta` (stop reason and usage) and `message_stop` follow the engine's `[DONE]`,
after its usage chunk. finish_reason stop -> end_turn (stop_sequence when vLLM's
`stop_reason` names one of ours), length -> max_tokens, tool_calls -> tool_use (and any
finish after a tool call), content_filter -> refusal.

count_tokens (`/v1/messages/count_tokens`) is answered `{"input_tokens": N}`, N the engine's
`/tokenize` count of the same messages and tools rendered with the generation prompt: the
prompt the call would have (bridge.call).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import orjson

from forge_record.bridge.base import Untranslatable

# Top-level fields the engine has no use for: hints and billing, dropped.
_DROPPED = frozenset({"cache_control", "metadata", "thinking", "service_tier", "betas",
                      "context_management", "anthropic_version"})
_SAMPLING = {"max_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p",
             "top_k": "top_k", "stop_sequences": "stop"}
_OWN = frozenset({"model", "messages", "system", "tools", "tool_choice", "stream",
                  "output_config", "output_format"})
_FINISH = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
           "function_call": "tool_use", "content_filter": "refusal"}
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 529: "overloaded_error"}
REASONING = "reasoning"  # the assistant message field vLLM 0.32 renders as reasoning


class AnthropicTranslator:
    dialect: ClassVar[str] = "anthropic.messages"

    def __init__(self, request: dict, *, path: str, model: str | None) -> None:
        self.request = request
        self.model = model
        self.streamed = request.get("stream") is True
        self.agent_model = request.get("model")
        self._started = False
        self._block: int | None = None  # the open block's index
        self._kind: str | None = None  # its kind: "thinking", "text" or "tool_use"
        self._blocks = 0  # blocks started so far
        self._tools: dict[int, int] = {}  # the engine's tool-call index -> our block index
        self._finish: str | None = None
        self._stop: Any = None  # vLLM's stop_reason: the stop string (or token id) matched
        self._usage: dict[str, Any] | None = None
        self._tool_called = False

    # --- the request ----------------------------------------------------------------------

    def chat_request(self) -> dict:
        req = self.request
        unknown = set(req) - _OWN - _DROPPED - set(_SAMPLING) - {"disable_parallel_tool_use"}
        for name in sorted(unknown):
            if req[name] not in (None, [], {}):
                raise Untranslatable(f"the field {name!r} has no Chat Completions equivalent")
        chat: dict[str, Any] = {"model": self.model or req.get("model")}
        chat["messages"] = [*_system(req.get("system")), *_messages(req.get("messages"))]
        if req.get("tools"):
            chat["tools"] = [_tool(t) for t in req["tools"]]
        for ours, theirs in _SAMPLING.items():
            if req.get(ours) is not None:
                chat[theirs] = req[ours]
        _tool_choice(req.get("tool_choice"), chat)
        _output(req.get("output_config") or {}, req.get("output_format"), chat)
        if self.streamed:
            chat["stream"] = True
        return chat

    # --- the answer, streamed -------------------------------------------------------------

    def events(self, chunk: dict) -> list[dict]:
        out: list[dict] = []
        if not self._started:
            self._started = True
            out.append(self._message_start(chunk))
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) == 0:  # Anthropic has one choice
                self._choice(choice, out)
        return out

    def end(self) -> list[dict]:
        out: list[dict] = []
        if not self._started:  # an engine that sent nothing: still a well-formed message
            self._started = True
            out.append(self._message_start({}))
        self._close(out)
        usage = _usage(self._usage)
        out.append({"type": "message_delta",
                    "delta": {"stop_reason": self._stop_reason(),
                              "stop_sequence": self._stop_sequence()},
                    "usage": usage})
        out.append({"type": "message_stop"})
        return out

    def _message_start(self, chunk: dict) -> dict:
        prompt = chunk.get("prompt_token_ids")
        usage = {"input_tokens": len(prompt) if isinstance(prompt, list) else 0,
                 "output_tokens": 0}
        return {"type": "message_start",
                "message": {"id": _message_id(chunk.get("id")), "type": "message",
                            "role": "assistant", "model": self.agent_model or chunk.get("model"),
                            "content": [], "stop_reason": None, "stop_sequence": None,
                            "usage": usage}}

    def _choice(self, choice: dict, out: list[dict]) -> None:
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""}, out)
            out.append(self._delta({"type": "thinking_delta", "thinking": reasoning}))
        if delta.get("content"):
            self._open("text", {"type": "text", "text": ""}, out)
            out.append(self._delta({"type": "text_delta", "text": delta["content"]}))
        for call in delta.get("tool_calls") or ():
            self._tool_call(call, out)
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
            self._stop = choice.get("stop_reason")
            self._close(out)

    def _tool_call(self, call: dict, out: list[dict]) -> None:
        index = call.get("index", 0)
        function = call.get("function") or {}
        if index not in self._tools:
            self._tool_called = True
            self._open("tool_use", {"type": "tool_use", "id": call.get("id") or "",
                                    "name": function.get("name") or "", "input": {}}, out,
                       force=True)
            self._tools[index] = self._block  # type: ignore[assignment]
        if function.get("arguments"):
            out.append({"type": "content_block_delta", "index": self._tools[index],
                        "delta": {"type": "input_json_delta",
                                  "partial_json": function["arguments"]}})

    def _open(self, kind: str, block: dict, out: list[dict], force: bool = False) -> None:
        if self._kind == kind and not force:
            return
        self._close(out)
        self._block, self._kind = self._blocks, kind
        self._blocks += 1
        out.append({"type": "content_block_start", "index": self._block, "content_block": block})

    def _close(self, out: list[dict]) -> None:
        if self._block is not None:
            out.append({"type": "content_block_stop", "index": self._block})
        self._block = self._kind = None

    def _delta(self, delta: dict) -> dict:
        return {"type": "content_block_delta", "index": self._block, "delta": delta}

    def _stop_reason(self) -> str | None:
        if self._finish is None:
            return None
        if self._tool_called:
            return "tool_use"
        if self._stop_sequence() is not None:
            return "stop_sequence"
        return _FINISH.get(self._finish, "end_turn")

    def _stop_sequence(self) -> str | None:
        stops = self.request.get("stop_sequences") or ()
        return self._stop if isinstance(self._stop, str) and self._stop in stops else None

    # --- the answer, whole ----------------------------------------------------------------

    def whole(self, answer: dict) -> dict:
        choices = answer.get("choices") or [{}]
        choice = min(choices, key=lambda c: c.get("index", 0))
        message = choice.get("message") or {}
        content: list[dict] = []
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning:
            content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
        if message.get("content"):
            content.append({"type": "text", "text": message["content"]})
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            content.append({"type": "tool_use", "id": call.get("id") or "",
                            "name": function.get("name") or "",
                            "input": _input(function.get("arguments"))})
        self._finish, self._stop = choice.get("finish_reason"), choice.get("stop_reason")
        self._tool_called = bool(message.get("tool_calls"))
        usage = _usage(answer.get("usage"))
        if usage["input_tokens"] is None:
            prompt = answer.get("prompt_token_ids")
            usage["input_tokens"] = len(prompt) if isinstance(prompt, list) else 0
        return {"id": _message_id(answer.get("id")), "type": "message", "role": "assistant",
                "model": self.agent_model or answer.get("model"), "content": content,
                "stop_reason": self._stop_reason(), "stop_sequence": self._stop_sequence(),
                "usage": usage}

    def count(self, tokens: int) -> dict:
        """count_tokens' answer: the engine's count of the rendered prompt."""
        return {"input_tokens": tokens}

    def error(self, status: int, message: str) -> dict:
        kind = _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}


# --- request pieces ----------------------------------------------------------------------


def _system(system: Any) -> list[dict]:
    if not system:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    texts = []
    for block in system:
        if block.get("type") != "text":
            raise Untranslatable(f"a system block of type {block.get('type')!r}")
        texts.append(block.get("text", ""))
    return [{"role": "system", "content": "\n".join(texts)}]


def _messages(messages: Any) -> list[dict]:
    out: list[dict] = []
    for message in messages or ():
        role, content = message.get("role"), message.get("content")
        if role == "assistant":
            out.append(_assistant(content))
        elif role == "user":
            out.extend(_user(content))
        elif role == "system":  # mid-conversation instructions (Claude Code 2.1): kept in place
            out.extend(_system(content))
        else:
            raise Untranslatable(f"a message of role {role!r}")
    return out


def _user(content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tools: list[dict] = []
    parts: list[dict] = []
    for block in content or ():
        kind = block.get("type")
        if kind == "tool_result":
            text, images = _tool_result(block)
            tools.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                          "content": text})
            parts.extend(images)
        elif kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            parts.append(_image(block))
        else:
            raise Untranslatable(f"a user block of type {kind!r}")
    user = []
    if parts:
        only_text = all(p["type"] == "text" for p in parts) and len(parts) == 1
        user = [{"role": "user", "content": parts[0]["text"] if only_text else parts}]
    return tools + user


def _tool_result(block: dict) -> tuple[str, list[dict]]:
    """A tool result's text (blocks joined by "\\n") and its images."""
    content = block.get("content")
    texts: list[str] = []
    images: list[dict] = []
    if isinstance(content, str):
        texts.append(content)
    for part in content if isinstance(content, list) else ():
        kind = part.get("type")
        if kind == "text":
            texts.append(part.get("text", ""))
        elif kind == "image":
            images.append(_image(part))
        else:
            raise Untranslatable(f"a tool_result block of type {kind!r}")
    text = "\n".join(texts)
    return ("Error: " + text if block.get("is_error") else text), images


def _image(block: dict) -> dict:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif source.get("type") == "url":
        url = source.get("url")
    else:
        raise Untranslatable(f"an image source of type {source.get('type')!r}")
    return {"type": "image_url", "image_url": {"url": url}}


def _assistant(content: Any) -> dict:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict] = []
    for block in content or ():
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "thinking":
            thinking.append(block.get("thinking", ""))
        elif kind == "redacted_thinking":
            continue  # opaque to anyone but Anthropic; an engine never makes one
        elif kind == "tool_use":
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"),
                                       "arguments": _arguments(block.get("input"))}})
        else:
            raise Untranslatable(f"an assistant block of type {kind!r}")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if thinking:
        message[REASONING] = "".join(thinking)
    if calls:
        message["tool_calls"] = calls
    return message


def _arguments(value: Any) -> str:
    # Python's json.dumps spacing, as vLLM's tool parsers write arguments
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def _tool(tool: dict) -> dict:
    kind = tool.get("type")
    if kind not in (None, "custom"):
        raise Untranslatable(f"the server tool {tool.get('name')!r} ({kind})")
    function = {"name": tool.get("name"), "parameters": tool.get("input_schema") or {}}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any, chat: dict) -> None:
    if not choice:
        return
    kind = choice.get("type")
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool":
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    else:
        raise Untranslatable(f"a tool_choice of type {kind!r}")
    if choice.get("disable_parallel_tool_use"):
        chat["parallel_tool_calls"] = False


def _output(config: dict, legacy: Any, chat: dict) -> None:
    """`output_config`: `effort` is a hint (dropped); `format` (or the older top-level
    `output_format`), a JSON schema the answer must follow, is Chat's `response_format`."""
    unknown = set(config) - {"effort", "format"}
    if unknown:
        raise Untranslatable(f"output_config.{sorted(unknown)[0]} has no Chat equivalent")
    form = config.get("format") or legacy
    if not form:
        return
    if form.get("type") != "json_schema":
        raise Untranslatable(f"an output format of type {form.get('type')!r}")
    chat["response_format"] = {"type": "json_schema",
                               "json_schema": {"name": "output", "schema": form.get("schema")}}


# --- answer pieces -----------------------------------------------------------------------


def _message_id(engine_id: Any) -> str:
    ident = str(engine_id or "bridged")
    return "msg_" + ident.removeprefix("chatcmpl-")


def _usage(usage: dict | None) -> dict[str, Any]:
    """Anthropic's usage from the engine's: input excludes cached tokens, read apart."""
    if not usage:
        return {"input_tokens": None, "output_tokens": 0}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    prompt = usage.get("prompt_tokens")
    out = {"input_tokens": prompt - cached if isinstance(prompt, int) else None,
           "output_tokens": usage.get("completion_tokens") or 0}
    if cached:
        out["cache_read_input_tokens"] = cached
    return out


def _input(arguments: Any) -> Any:
    """A tool call's arguments as the tool_use input: an object, as Anthropic's always is."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
