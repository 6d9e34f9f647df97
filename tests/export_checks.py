"""Each exported line checked with its consumer's own rules, eagerly, every block read: one
module, used by the export tests and by every real-CLI test (`check_session_exports`).

- `anthropic` lines through the anthropic SDK's request types (`MessageParam`, every content
  block by its own `*BlockParam` type: the SDK types content as an `Iterable`, which pydantic
  checks lazily, so each block is validated on its own), plus the Messages API's turn rules
  (user first, user and assistant alternate, `system` messages between them as the SDK's
  `SystemMessageParam` allows, each `tool_result` answers a `tool_use` of the turn before);
- `openai` lines by OpenAI's documented chat fine-tuning rules (`openai_problems`: the
  `FineTuneChatRequestInput` schema, the fine-tuning guide, the data-preparation cookbook's
  format checks) and each message as the openai SDK's `ChatCompletionMessageParam`;
- `sharegpt` lines by LLaMA-Factory's sharegpt converter and tool formatter rules
  (`llama_factory_reads`);
- `otel` lines parsed as OTLP `ExportTraceServiceRequest` with `opentelemetry-proto`
  (`as_protobuf`), every parent span present.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

import orjson
from anthropic.types import (
    DocumentBlockParam,
    ImageBlockParam,
    MessageParam,
    RedactedThinkingBlockParam,
    ServerToolUseBlockParam,
    TextBlockParam,
    ThinkingBlockParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)
from google.protobuf import json_format
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from pydantic import TypeAdapter, ValidationError

from forge_record.exporters import Filters, Options, export
from forge_record.exporters.sharegpt import alternates
from forge_record.store import open_store

# --- anthropic ------------------------------------------------------------------------------

_BLOCKS = {"text": TextBlockParam, "image": ImageBlockParam, "document": DocumentBlockParam,
           "tool_use": ToolUseBlockParam, "tool_result": ToolResultBlockParam,
           "thinking": ThinkingBlockParam, "redacted_thinking": RedactedThinkingBlockParam,
           "server_tool_use": ServerToolUseBlockParam}
_ADAPTERS: dict[Any, TypeAdapter] = {}


def _valid(kind: Any, value: Any) -> str | None:
    adapter = _ADAPTERS.get(kind) or _ADAPTERS.setdefault(kind, TypeAdapter(kind))
    try:
        adapter.validate_python(value)
    except ValidationError as e:
        return str(e).splitlines()[0]
    return None


def _block_problems(block: Any) -> list[str]:
    """One block by its own type, and the blocks inside a tool result the same way."""
    kind = _BLOCKS.get(block.get("type")) if isinstance(block, dict) else None
    if kind is None:
        return [f"unknown block {block!r:.80}"]
    if why := _valid(kind, block):
        return [why]
    inner = block.get("content") if block["type"] == "tool_result" else None
    return [f"inside: {p}" for b in (inner if isinstance(inner, list) else ())
            for p in _block_problems(b)]


def anthropic_problems(line: dict) -> list[str]:
    """What the anthropic SDK's request types and the Messages API's turn rules refuse."""
    problems = [f"unknown key {k}" for k in line if k not in ("system", "tools", "messages")]
    for i, block in enumerate(line.get("system") or ()):
        if why := _valid(TextBlockParam, block):
            problems.append(f"system block {i}: {why}")
    for i, tool in enumerate(line.get("tools") or ()):
        if "type" not in tool and (why := _valid(ToolParam, tool)):
            problems.append(f"tool {i}: {why}")
    messages = line.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages missing or empty"]
    asked: set[str] = set()
    turn = 0  # system messages (the SDK's SystemMessageParam) stand between turns
    for i, m in enumerate(messages):
        if why := _valid(MessageParam, m):
            problems.append(f"message {i}: {why}")
            continue
        if m["role"] == "system":
            continue
        if m["role"] != ("user" if turn % 2 == 0 else "assistant"):
            problems.append(f"message {i}: {m['role']} where the turns alternate from user")
        turn += 1
        blocks = m["content"] if isinstance(m["content"], list) else []
        for j, block in enumerate(blocks):
            problems += [f"message {i} block {j}: {p}" for p in _block_problems(block)]
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in asked:
                problems.append(f"message {i} block {j}: a result for no tool_use before it")
        asked = {b["id"] for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"}
    return problems


# --- openai -----------------------------------------------------------------------------------

LINE_KEYS = {"messages", "tools", "parallel_tool_calls", "functions"}
ROLE_KEYS = {
    "system": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "function_call", "refusal", "weight"},
    "tool": {"role", "content", "tool_call_id"},
    "function": {"role", "content", "name"},
}
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def openai_problems(line: dict) -> list[str]:
    """What breaks OpenAI's documented chat fine-tuning rules in one line (empty: none)."""
    if not isinstance(line, dict):
        return ["line is not an object"]
    problems = [f"unknown key {k}" for k in line if k not in LINE_KEYS]
    messages = line.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages missing or empty"]
    for i, m in enumerate(messages):
        problems += [f"message {i}: {p}" for p in _message_problems(m)]
    problems += _pairing_problems(messages)
    assistants = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    if not assistants or messages[-1].get("role") != "assistant":
        problems.append("does not end on an assistant message")
    if assistants and not any(m.get("weight", 1) == 1 for m in assistants):
        problems.append("no assistant message is trained on")
    problems += _tools_problems(line)
    return problems


def _message_problems(m: dict) -> list[str]:
    role = m.get("role") if isinstance(m, dict) else None
    if role not in ROLE_KEYS:
        return [f"unknown role {role!r}"]
    out = [f"unknown key {k}" for k in m if k not in ROLE_KEYS[role]]
    content = m.get("content")
    if role == "system" and not _is_text(content, ("text",)):
        out.append("system content is not text")
    if role == "user" and not _is_text(content, ("text", "image_url")):
        out.append("user content is neither text nor text and images")
    if role == "tool" and not (isinstance(content, str) and isinstance(m.get("tool_call_id"), str)):
        out.append("tool message needs string content and a tool_call_id")
    if role == "assistant":
        out += _assistant_problems(m)
    return out


def _is_text(content, part_types) -> bool:
    if isinstance(content, str):
        return True
    return isinstance(content, list) and bool(content) and all(
        isinstance(p, dict) and p.get("type") in part_types for p in content)


def _assistant_problems(m: dict) -> list[str]:
    out = []
    if m.get("content") is None and not m.get("tool_calls") and not m.get("function_call"):
        out.append("assistant has neither content nor tool_calls")
    if m.get("content") is not None and not _is_text(m["content"], ("text", "refusal")):
        out.append("assistant content is not text")
    if "weight" in m and m["weight"] not in (0, 1):
        out.append("weight is not 0 or 1")
    for call in m.get("tool_calls") or ():
        fn = call.get("function") or {}
        if call.get("type") != "function" or not isinstance(call.get("id"), str) \
                or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
            out.append(f"bad tool call {call}")
            continue
        try:
            orjson.loads(fn["arguments"])
        except orjson.JSONDecodeError:
            out.append(f"arguments of {call['id']} are not JSON")
    return out


def _pairing_problems(messages: list) -> list[str]:
    out, open_calls, last = [], set(), len(messages) - 1
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "tool":
            if m.get("tool_call_id") not in open_calls:
                out.append(f"message {i}: tool message answers no open call")
            open_calls.discard(m.get("tool_call_id"))
            continue
        if open_calls:
            out.append(f"message {i}: calls {sorted(open_calls)} were not answered")
            open_calls = set()
        if role == "assistant":
            open_calls = {c.get("id") for c in m.get("tool_calls") or ()}
            if i == last:
                open_calls = set()
    if open_calls:
        out.append(f"calls {sorted(open_calls)} were not answered")
    return out


def _tools_problems(line: dict) -> list[str]:
    out = []
    for tool in line.get("tools") or ():
        fn = tool.get("function") or {}
        if tool.get("type") != "function" or not TOOL_NAME.match(str(fn.get("name"))):
            out.append(f"bad tool {tool}")
        if set(fn) - {"name", "description", "parameters", "strict"}:
            out.append(f"unknown tool keys {set(fn)}")
    if "parallel_tool_calls" in line and not isinstance(line["parallel_tool_calls"], bool):
        out.append("parallel_tool_calls is not a boolean")
    return out


# --- fixtures ------------------------------------------------------------------------------


def openai_sdk_problems(line: dict) -> list[str]:
    """Each message as the openai SDK's ChatCompletionMessageParam, each tool as a tool param
    (our `weight` is the fine-tuning extension the SDK's chat types do not name)."""
    problems = []
    for i, m in enumerate(line.get("messages") or ()):
        plain = {k: v for k, v in m.items() if k != "weight"}
        if why := _valid(ChatCompletionMessageParam, plain):
            problems.append(f"message {i}: {why}")
    for i, tool in enumerate(line.get("tools") or ()):
        if why := _valid(ChatCompletionFunctionToolParam, tool):
            problems.append(f"tool {i}: {why}")
    return problems


# --- sharegpt ---------------------------------------------------------------------------------


def llama_factory_reads(line: dict) -> list[str]:
    """What LLaMA-Factory's sharegpt converter and tool formatter would refuse."""
    problems = []
    turns = line["conversations"]
    if not alternates(turns):
        problems.append("turns do not alternate user side / model side, ending on the model")
    for turn in turns:
        if turn["from"] == "function_call":
            calls = orjson.loads(turn["value"])
            for call in calls if isinstance(calls, list) else [calls]:
                if set(call) != {"name", "arguments"}:
                    problems.append(f"function_call {call}")
        elif not isinstance(turn["value"], str):
            problems.append(f"value of {turn['from']} is not a string")
    if line["tools"] and not isinstance(orjson.loads(line["tools"]), list):
        problems.append("tools is not a JSON list")
    return problems


# --- otel -------------------------------------------------------------------------------------


def as_protobuf(line: dict) -> ExportTraceServiceRequest:
    """Parse with the OTLP protobuf definitions. OTLP JSON writes ids as hex where protobuf's
    own JSON mapping wants base64, so ids are converted first (and must be 16 / 8 bytes)."""
    line = orjson.loads(orjson.dumps(line))
    for rs in line["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key, size in (("traceId", 16), ("spanId", 8), ("parentSpanId", 8)):
                    if key in span:
                        raw = bytes.fromhex(span[key])
                        assert len(raw) == size, (key, span[key])
                        span[key] = base64.b64encode(raw).decode()
    return json_format.ParseDict(line, ExportTraceServiceRequest())


def otlp_problems(line: dict) -> list[str]:
    try:
        request = as_protobuf(line)
    except (AssertionError, ValueError, json_format.ParseError) as e:
        return [f"not OTLP JSON: {e}"]
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    ids = {s.span_id for s in spans}
    problems = [f"span {s.name}: parent missing" for s in spans
                if s.parent_span_id and s.parent_span_id not in ids]
    problems += [f"span {s.name}: ends before it starts" for s in spans
                 if s.end_time_unix_nano < s.start_time_unix_nano]
    return problems


# --- a whole session ----------------------------------------------------------------------------

CHECKS = {
    "anthropic": anthropic_problems,
    "openai": lambda line: openai_problems(line) + openai_sdk_problems(line),
    "sharegpt": llama_factory_reads,
    "otel": otlp_problems,
}


def _sketch(line: dict) -> list[str]:
    """A failing line for a person: each message's role and the start of its content."""
    turns = line.get("messages") or line.get("conversations") or []
    return [f"{t.get('role') or t.get('from')}: "
            f"{orjson.dumps(t.get('content', t.get('value')))[:300]!r}" for t in turns]


def check_session_exports(store_url: str, session: str = "last",
                          expect_lines: bool = True) -> dict[str, list[dict]]:
    """Export one session in every checked format and check each line; the lines by format.
    `expect_lines`: a session with a model answer must give at least one line of each."""
    found: dict[str, list[dict]] = {}
    store = open_store(store_url)
    try:
        session_id = store.resolve_session(session)
        for fmt, check in CHECKS.items():
            out = io.BytesIO()
            export(store, fmt, out, Filters(sessions=(session_id,)), Options())
            lines = [orjson.loads(raw) for raw in out.getvalue().splitlines()]
            for n, line in enumerate(lines):
                problems = check(line)
                assert not problems, (fmt, n, problems, _sketch(line))
            assert lines or not expect_lines, f"{fmt}: no line exported"
            found[fmt] = lines
    finally:
        store.close()
    return found


def check_recorded_cli_session(forge_home: str, shown: dict) -> dict[str, list[dict]]:
    """For the real-CLI tests: the session `show last --json` printed (`shown`) is one
    conversation (one main thread: issue 18.1), and its exports pass every consumer."""
    mains = [t["id"] for t in shown["lineage"]["threads"] if t["role"] == "main"]
    assert mains == ["main"], shown["lineage"]["threads"]
    return check_session_exports(f"sqlite:///{forge_home}/traces.db", shown["id"])
