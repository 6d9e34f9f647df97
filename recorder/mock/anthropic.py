"""The mock's Anthropic Messages API: JSON or SSE (`"stream": true`), for the official SDK
and Claude Code.

What it answers is decided by a script, a function from the request body to an assistant
message (`{"content": [...], "stop_reason": ...}`), taken from the mock's
`options["anthropic_script"]` (default `agent_script`). Streams are cut the way the API cuts
them: text in short deltas, tool input JSON in fragments split inside keys, first one empty.

Scripts: `agent_script` (a Bash call when the prompt carries TOOL_MARKER), `subagent_script`
(the main agent delegates through Claude Code's `Agent` tool when the prompt carries
SUBAGENT_MARKER; the subagent then runs the Bash call and the parent reports its answer).
Both answer a compaction request with a summary in `<summary>` tags. Option "overload_first"
N: the first N `/v1/messages` calls get a 529 `overloaded_error` with `x-should-retry: true`,
so an SDK client retries them (with `x-stainless-retry-count`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator

import orjson

from forge_record.mock import TOOL_MARKER, CutStream, MockUpstream, Received, Reply, hold

Script = Callable[[dict], dict]

SUBAGENT_MARKER = "forge-record-subagent"
AGENT_TOOL = "Agent"  # Claude Code 2.1.197's subagent tool (older versions called it Task)
# The opening of the instruction Claude Code appends to the last user message to compact.
COMPACT_INSTRUCTION = "Your task is to create a detailed summary of the conversation so far"
COMPACT_SUMMARY = ("<analysis>The user asked for one command.</analysis>\n<summary>The user ran "
                   "the forge-record-e2e command; it printed forge-record-e2e-output-42.</summary>")


def _ids(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:24]


def text_message(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


def _last_user(request: dict) -> dict:
    """The newest user turn; Claude Code may append a system-role message after it."""
    users = [m for m in request.get("messages") or [] if m.get("role") == "user"]
    return users[-1] if users else {"content": ""}


def _result_text(block: dict) -> str:
    output = block.get("content")
    if isinstance(output, list):
        output = "".join(b.get("text", "") for b in output)
    return str(output)


def agent_script(request: dict) -> dict:
    """Ask for a Bash call when the prompt carries TOOL_MARKER; once the tool result comes
    back, answer with it. Any other request (titles, summaries) gets a short text."""
    last = _last_user(request)
    blocks = last["content"] if isinstance(last["content"], list) else []
    prompt = orjson.dumps(last["content"]).decode()
    if COMPACT_INSTRUCTION in prompt:
        return text_message(COMPACT_SUMMARY)
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if results:
        return text_message(f"The command printed: {_result_text(results[0])}")
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


def subagent_script(request: dict) -> dict:
    """When the prompt carries SUBAGENT_MARKER and the `Agent` tool is offered, delegate a
    TOOL_MARKER task to a subagent; when that subagent's result comes back, report it. The
    subagent's own calls (its prompt carries TOOL_MARKER) go to `agent_script`."""
    last = _last_user(request)
    blocks = last["content"] if isinstance(last["content"], list) else []
    prompt = orjson.dumps(last["content"]).decode()
    if COMPACT_INSTRUCTION in prompt:
        return text_message(COMPACT_SUMMARY)
    agent_results = [b for b in blocks if b.get("type") == "tool_result"
                     and str(b.get("tool_use_id", "")).startswith("toolu_02")]
    if agent_results:
        return text_message(f"The subagent reported: {_result_text(agent_results[0])}")
    offered = any(t.get("name") == AGENT_TOOL for t in request.get("tools", []))
    if SUBAGENT_MARKER in prompt and offered:
        return {
            "content": [
                {"type": "text", "text": "I'll delegate this to a subagent."},
                {
                    "type": "tool_use",
                    # toolu_02: how the script knows its own Agent call when the result returns
                    "id": "toolu_02" + _ids(prompt.encode())[:22],
                    "name": AGENT_TOOL,
                    "input": {
                        "description": "Run the marker command",
                        "prompt": f"Run the {TOOL_MARKER} command and report what it printed.",
                        "subagent_type": "general-purpose",
                    },
                },
            ],
            "stop_reason": "tool_use",
        }
    return agent_script(request)


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


OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _messages(mock: MockUpstream, received: Received) -> Reply:
    if _overloaded(mock):
        return Reply(status=529, body=orjson.dumps(OVERLOADED),
                     headers={"x-should-retry": "true", "retry-after-ms": "10"})
    request = received.json() if received.body else {}
    script: Script = mock.options.get("anthropic_script", agent_script)
    message = full_message(request, script(request), received.body)
    if request.get("stream"):
        return Reply.stream(_paced(sse_events(message), mock.options))
    return Reply.json(message)


def _paced(events: Iterator[bytes], options: dict) -> Iterator[bytes]:
    """Options for fault tests: "event_delay" seconds between events; "cut_after" N events,
    then the connection drops as in an upstream reset; "hold" (see mock.hold)."""
    delay, cut_after = options.get("event_delay", 0), options.get("cut_after")
    for n, event in enumerate(events):
        if cut_after is not None and n == cut_after:
            raise CutStream
        if delay:
            time.sleep(delay)
        if n == 1:
            hold(options)  # the first event is out: the call is in flight
        yield event


def _overloaded(mock: MockUpstream) -> bool:
    """Whether option "overload_first" (N) says this call is among the first N to fail."""
    first = mock.options.get("overload_first", 0)
    seen = sum(r.path.split("?")[0] == "/v1/messages" for r in list(mock.requests))
    return seen <= first


def _count_tokens(mock: MockUpstream, received: Received) -> Reply:
    return Reply.json({"input_tokens": 42})


ROUTES = [
    ("POST", lambda path: path == "/v1/messages", _messages),
    ("POST", lambda path: path == "/v1/messages/count_tokens", _count_tokens),
]
