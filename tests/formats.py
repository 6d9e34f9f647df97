"""Checkers of what training frameworks document for their data formats, for the export tests.

`openai_problems(line)`: what breaks the rules OpenAI documents for a supervised chat
fine-tuning line (the `FineTuneChatRequestInput` schema of the OpenAI API reference, its
fine-tuning guide and the data-preparation cookbook's format checks):
- a line is an object whose keys are among messages, tools, parallel_tool_calls, functions;
- `messages` is a non-empty list; roles are system, user, assistant, tool (function is the
  deprecated form); each role has its own keys;
- input messages hold text or images only: system content is text, user content a string or
  text / image_url parts; a tool message has a string `content` and its `tool_call_id`;
- an assistant message has content or tool_calls (or function_call); `weight` is 0 or 1;
  tool_calls are `{id, type: "function", function: {name, arguments}}` with `arguments` a
  JSON string;
- every tool message answers a call of the assistant turn before it, and every tool call of
  an assistant turn that the example goes on after is answered by a tool message with its id
  (the example's last turn is the target and may end on calls, as OpenAI's own examples do);
- there is an assistant message, the example ends on one, and at least one has weight 1;
- tools are `{type: "function", function: {name, description?, parameters?}}` with names of
  at most 64 of `a-zA-Z0-9_-`; `parallel_tool_calls` is a boolean.

`llama_factory_reads(line)`: what LLaMA-Factory's sharegpt converter and tool formatter would
refuse in a `--format sharegpt` line.
"""

from __future__ import annotations

import re

import orjson

from forge_record.exporters.sharegpt import alternates

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
