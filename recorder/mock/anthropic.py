"""The mock's Anthropic Messages API: JSON or SSE (`"stream": true`), for the official SDK
and Claude Code.

What it answers is decided by a script, a function from the request body to an assistant
message (`{"content": [...], "stop_reason": ...}`), taken from the mock's
`options["anthropic_script"]` (default `agent_script`). Streams are cut the way the API cuts
them: text in short deltas, tool input JSON in fragments split inside keys, first one empty.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator

import orjson

from forge_record.mock import TOOL_MARKER, CutStream, MockUpstream, Received, Reply

Script = Callable[[dict], dict]


def _ids(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:24]


def text_message(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


def agent_script(request: dict) -> dict:
    """Ask for a Bash call when the prompt carries TOOL_MARKER; once the tool result comes
    back, answer with it. Any other request (titles, summaries) gets a short text."""
    # The newest user turn; Claude Code may append a system-role message after it.
    users = [m for m in request.get("messages") or [] if m.get("role") == "user"]
    last = users[-1] if users else {"content": ""}
    blocks = last["content"] if isinstance(last["content"], list) else []
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if results:
        output = results[0].get("content")
        if isinstance(output, list):
            output = "".join(b.get("text", "") for b in output)
        return text_message(f"The command printed: {output}")
    prompt = orjson.dumps(last["content"]).decode()
    if TOOL_MARKER in prompt and any(t.get("name") == "Bash" for t in request.get("tools", [])):
        command = f"echo {TOOL_MARKER}-output-$((6*7))"
        return {
            "content": [
                {"type": "text", "text": "I'll run that command."},
                {
                    "type": "tool_use",
                    "id": "toolu_01" + _ids(prompt.encode())[:22],
                    "name": "Bash",
                    "input": {"command": command, "description": "Print a marker"},
                },
            ],
            "stop_reason": "tool_use",
        }
    return text_message("OK from the mock.")


def full_message(request: dict, reply: dict, body: bytes) -> dict:
    return {
        "id": "msg_01" + _ids(body),
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "claude-mock"),
        "content": reply["content"],
        "stop_reason": reply["stop_reason"],
        "stop_sequence": None,
        "usage": {
            "input_tokens": 100 + len(body) // 1000,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 20,
        },
    }


def sse_events(message: dict) -> Iterator[bytes]:
    """The message as the Messages API streams it, one SSE event per item."""

    def event(name: str, data: dict) -> bytes:
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    start = dict(message, content=[], stop_reason=None)
    start["usage"] = dict(message["usage"], output_tokens=1)
    yield event("message_start", {"type": "message_start", "message": start})
    yield event("ping", {"type": "ping"})
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield event("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": {"type": "text", "text": ""}})
            for piece in _pieces(block["text"], 8):
                yield event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "text_delta", "text": piece}})
        else:
            yield event("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": dict(block, input={})})
            raw = orjson.dumps(block["input"]).decode()
            for piece in ["", *_pieces(raw, 7)]:
                yield event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "input_json_delta",
                                                              "partial_json": piece}})
        yield event("content_block_stop", {"type": "content_block_stop", "index": i})
    yield event("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": message["stop_reason"],
                                            "stop_sequence": None},
                                  "usage": {"output_tokens": message["usage"]["output_tokens"]}})
    yield event("message_stop", {"type": "message_stop"})


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _messages(mock: MockUpstream, received: Received) -> Reply:
    request = received.json() if received.body else {}
    script: Script = mock.options.get("anthropic_script", agent_script)
    message = full_message(request, script(request), received.body)
    if request.get("stream"):
        return Reply.stream(_paced(sse_events(message), mock.options))
    return Reply.json(message)


def _paced(events: Iterator[bytes], options: dict) -> Iterator[bytes]:
    """Options for fault tests: "event_delay" seconds between events; "cut_after" N events,
    then the connection drops as in an upstream reset."""
    delay, cut_after = options.get("event_delay", 0), options.get("cut_after")
    for n, event in enumerate(events):
        if cut_after is not None and n == cut_after:
            raise CutStream
        if delay:
            time.sleep(delay)
        yield event


def _count_tokens(mock: MockUpstream, received: Received) -> Reply:
    return Reply.json({"input_tokens": 42})


ROUTES = [
    ("POST", lambda path: path == "/v1/messages", _messages),
    ("POST", lambda path: path == "/v1/messages/count_tokens", _count_tokens),
]
