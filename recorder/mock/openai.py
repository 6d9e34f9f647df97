"""The mock's OpenAI HTTP APIs: Chat Completions (`POST /v1/chat/completions`) and
Responses (`POST /v1/responses`), JSON or SSE (`"stream": true`), for the official SDK and
OpenAI-compatible clients. (Responses over WebSocket lives in `openai_ws`.)

The script, shared by both APIs: when the newest user message carries TOOL_MARKER and a
function tool is offered, ask for a shell-ish call of it (Codex's `exec_command`, a `Bash`
or `shell` tool, or else the first function tool with its first property set to the
command); once a tool result comes back (a `tool` message, a `function_call_output`), answer
with it; anything else gets a short text. `options["openai_parallel_tools"] = True` asks for
two calls at once (a second call of the same tool). `options["chat_script"]` and
`options["responses_script"]`, functions of the request to (text, [{call_id, name,
arguments}]), answer Chat Completions and Responses calls instead.

Streams are cut the way the APIs cut them: text in short deltas; Chat tool-call arguments
in fragments by `index` (parallel calls interleaved, the first fragment carrying id, type
and name); with `stream_options.include_usage` every chunk has `"usage": null` and a last
chunk with `"choices": []` carries the usage; `[DONE]` ends it. Responses streams go
created, in_progress, then per item added / deltas / done, then `response.completed` with
the whole response. Ids derive from the request body, so replies are deterministic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import orjson

from forge_record.mock import TOOL_MARKER, MockUpstream, Received, Reply

_SHELL_TOOLS = {"exec_command": lambda c: {"cmd": c}, "Bash": lambda c: {"command": c},
                "shell": lambda c: {"command": ["bash", "-lc", c]}}
CREATED = 1_767_225_600


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text") or p.get("output") or "" for p in content or ()
                   if isinstance(p, dict))


# --- the script --------------------------------------------------------------------------


def _calls(prompt: str, tools: list[dict[str, Any]], parallel: bool) -> list[dict[str, Any]]:
    """[{call_id, name, arguments}] for a prompt, or [] when no call is wanted."""
    names = [t.get("name") or (t.get("function") or {}).get("name") for t in tools
             if t.get("type", "function") == "function"]
    if TOOL_MARKER not in prompt or not names:
        return []
    name = next((n for n in names if n in _SHELL_TOOLS), names[0])
    commands = [f"echo {TOOL_MARKER}-output-$((6*7))"]
    if parallel:
        commands.append(f"echo {TOOL_MARKER}-second-call")
    return [{"call_id": "call_" + _digest((prompt + command).encode())[:24], "name": name,
             "arguments": orjson.dumps(_arguments(name, tools, command)).decode()}
            for command in commands]


def _arguments(name: str, tools: list[dict[str, Any]], command: str) -> dict[str, Any]:
    if name in _SHELL_TOOLS:
        return _SHELL_TOOLS[name](command)
    tool = next(t for t in tools if name in (t.get("name"), (t.get("function") or {})
                                              .get("name")))
    schema = tool.get("parameters") or (tool.get("function") or {}).get("parameters") or {}
    return {next(iter(schema.get("properties") or {"input": None})): command}


def _answer(tool_output: str | None, prompt: str, tools: list, parallel: bool):
    """(text, calls): what the model says."""
    if tool_output is not None:
        return f"The command printed: {tool_output}", []
    calls = _calls(prompt, tools, parallel)
    return ("I'll run that command." if calls else "OK from the mock."), calls


def _usage_counts(body: bytes) -> tuple[int, int]:
    prompt = 100 + len(body) // 100
    return prompt, min(64, prompt // 2)  # (prompt tokens, of which cached)


# --- Chat Completions --------------------------------------------------------------------


def _chat_answer(mock: MockUpstream, request: dict) -> tuple[str, list[dict]]:
    if script := mock.options.get("chat_script"):
        return script(request)
    messages = request.get("messages") or []
    last = messages[-1] if messages else {}
    output = _text(last.get("content")) if last.get("role") in ("tool", "function") else None
    users = [m for m in messages if m.get("role") == "user"]
    prompt = _text(users[-1].get("content")) if users else ""
    return _answer(output, prompt, request.get("tools") or [],
                   bool(mock.options.get("openai_parallel_tools")))


def _chat_usage(body: bytes, completion: int) -> dict[str, Any]:
    prompt, cached = _usage_counts(body)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0}}


def _tool_calls(calls: list[dict]) -> list[dict]:
    return [{"id": c["call_id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]


def chat_completion(request: dict, body: bytes, text: str, calls: list[dict]) -> dict:
    message = {"role": "assistant", "content": None if calls else text, "refusal": None,
               "annotations": []}
    if calls:
        message["tool_calls"] = _tool_calls(calls)
    return {"id": "chatcmpl-" + _digest(body)[:29], "object": "chat.completion",
            "created": CREATED, "model": request.get("model", "gpt-mock"),
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": _chat_usage(body, 20), "service_tier": "default",
            "system_fingerprint": "fp_mock"}


def chat_chunks(completion: dict, include_usage: bool) -> Iterator[bytes]:
    """The completion as the API streams it, one SSE event per chunk."""
    top = {k: completion[k] for k in ("id", "created", "model", "service_tier",
                                      "system_fingerprint")}
    top["object"] = "chat.completion.chunk"

    def chunk(delta: dict | None, finish: str | None = None, **extra: Any) -> bytes:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None,
                                             "finish_reason": finish}]
        data = {**top, "choices": choices, **({"usage": None} if include_usage else {}),
                **extra}
        return b"data: " + orjson.dumps(data) + b"\n\n"

    choice = completion["choices"][0]
    message = choice["message"]
    yield chunk({"role": "assistant", "content": "" if message["content"] else None,
                 "refusal": None})
    for piece in _pieces(message["content"] or "", 8) if message["content"] else ():
        yield chunk({"content": piece})
    yield from (chunk({"tool_calls": [f]}) for f in _interleaved(message.get("tool_calls")))
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield chunk(None, usage=completion["usage"])
    yield b"data: [DONE]\n\n"


def _interleaved(tool_calls: list[dict] | None) -> Iterator[dict]:
    """Fragments of every call, by index: each call's opening fragment, then argument pieces
    taken in turn from each call, as parallel calls arrive from the API."""
    queues = []
    for index, call in enumerate(tool_calls or ()):
        yield {"index": index, "id": call["id"], "type": "function",
               "function": {"name": call["function"]["name"], "arguments": ""}}
        queues.append([{"index": index, "function": {"arguments": p}}
                       for p in _pieces(call["function"]["arguments"], 7)])
    while any(queues):
        for queue in queues:
            if queue:
                yield queue.pop(0)


def _chat(mock: MockUpstream, received: Received) -> Reply:
    request = received.json() if received.body else {}
    completion = chat_completion(request, received.body, *_chat_answer(mock, request))
    if not request.get("stream"):
        return Reply.json(completion)
    include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
    return Reply.stream(chat_chunks(completion, include_usage))


# --- Responses ---------------------------------------------------------------------------


def _responses_answer(mock: MockUpstream, request: dict) -> tuple[str, list[dict]]:
    if script := mock.options.get("responses_script"):
        return script(request)
    items = request.get("input") or []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    last = items[-1] if items else {}
    output = None
    if last.get("type") in ("function_call_output", "custom_tool_call_output"):
        output = _text(last.get("output"))
    users = [i for i in items if i.get("type", "message") == "message"
             and i.get("role") == "user"]
    prompt = _text(users[-1].get("content")) if users else ""
    return _answer(output, prompt, request.get("tools") or [],
                   bool(mock.options.get("openai_parallel_tools")))


def response_object(request: dict, body: bytes, text: str, calls: list[dict]) -> dict:
    key = _digest(body)
    output: list[dict] = [{"type": "message", "id": "msg_" + key[:24], "status": "completed",
                           "role": "assistant", "content": [
                               {"type": "output_text", "text": text, "annotations": [],
                                "logprobs": []}]}]
    output += [{"type": "function_call", "id": "fc_" + c["call_id"][5:], "status": "completed",
                "call_id": c["call_id"], "name": c["name"], "arguments": c["arguments"]}
               for c in calls]
    prompt, cached = _usage_counts(body)
    return {"id": "resp_" + key[:32], "object": "response", "created_at": CREATED,
            "status": "completed", "error": None, "incomplete_details": None,
            "model": request.get("model", "gpt-mock"), "output": output,
            "parallel_tool_calls": True, "previous_response_id":
            request.get("previous_response_id"), "store": request.get("store", True),
            "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
                      "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": prompt + 20}}


def response_events(response: dict) -> Iterator[bytes]:
    """The response as the API streams it, one SSE event per chunk."""
    seq = iter(range(1 << 30))

    def event(kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": next(seq), **fields}
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    start = dict(response, status="in_progress", output=[], usage=None)
    yield event("response.created", response=start)
    yield event("response.in_progress", response=start)
    for index, item in enumerate(response["output"]):
        yield from _item_events(event, index, item)
    yield event("response.completed", response=response)


def _item_events(event, index: int, item: dict) -> Iterator[bytes]:
    ids = {"item_id": item["id"], "output_index": index}
    if item["type"] == "function_call":
        yield event("response.output_item.added", output_index=index,
                    item=dict(item, arguments="", status="in_progress"))
        for piece in _pieces(item["arguments"], 7):
            yield event("response.function_call_arguments.delta", **ids, delta=piece)
        yield event("response.function_call_arguments.done", **ids,
                    arguments=item["arguments"])
    else:
        yield event("response.output_item.added", output_index=index,
                    item=dict(item, content=[], status="in_progress"))
        part, at = item["content"][0], {**ids, "content_index": 0}
        yield event("response.content_part.added", **at, part=dict(part, text=""))
        for piece in _pieces(part["text"], 8):
            yield event("response.output_text.delta", **at, delta=piece, logprobs=[])
        yield event("response.output_text.done", **at, text=part["text"], logprobs=[])
        yield event("response.content_part.done", **at, part=part)
    yield event("response.output_item.done", output_index=index, item=item)


def _responses(mock: MockUpstream, received: Received) -> Reply:
    request = received.json() if received.body else {}
    response = response_object(request, received.body, *_responses_answer(mock, request))
    if not request.get("stream"):
        return Reply.json(response)
    return Reply.stream(response_events(response))


ROUTES = [
    ("POST", lambda path: path.endswith("/chat/completions"), _chat),
    ("POST", lambda path: path.endswith("/responses"), _responses),
]
