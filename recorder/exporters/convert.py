"""Helpers the chat formats share to turn normalized blocks into a target's shapes.

Conversion always goes through the normalized record, whatever dialect was recorded. What a
target cannot hold goes to a `Loss`: it is counted in the tally under a plain-words reason
and, with --keep-extras, kept (as the record's own block dict) in the message's `x_extras`.
Tool arguments become a JSON object: a freeform call (OpenAI custom tools such as Codex's
apply_patch) and arguments that never parsed are wrapped as `{"input": <text>}`, counted as
converted, because both OpenAI's `arguments` and Anthropic's `input` must be JSON objects.
"""

from __future__ import annotations

from typing import Any

from forge_record.exporters.base import Tally
from forge_record.records import (
    Block,
    Media,
    Other,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    block_to_dict,
)

FREEFORM_SCHEMA = {"type": "object", "properties": {"input": {"type": "string"}},
                   "required": ["input"]}
EXTRAS_KEY = "x_extras"
META_KEY = "x_forge"


class Loss:
    """What one message could not hold."""

    def __init__(self, tally: Tally, keep: bool) -> None:
        self.tally = tally
        self.keep = keep
        self.kept: list[dict[str, Any]] = []

    def drop(self, block: Block, why: str | None = None) -> None:
        self.tally.dropped[why or reason(block)] += 1
        if self.keep:
            self.kept.append(block_to_dict(block))

    def lose(self, why: str, kept: dict[str, Any]) -> None:
        """Something that is not a block (a flag, a role) the format cannot hold."""
        self.tally.dropped[why] += 1
        if self.keep:
            self.kept.append(kept)

    def attach(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.kept:
            message[EXTRAS_KEY] = self.kept
        return message


def reason(block: Block) -> str:
    """A plain-words name for a kind of block, as the summary counts it."""
    match block:
        case Media(type=kind):
            return f"{kind}s"
        case Other(data=data):
            kind = data.get("type") if isinstance(data, dict) else None
            return f"{kind or 'unknown'} blocks"
        case ToolCall(server=True):
            return "server tool calls"
        case ToolResult(name=name) if name:
            return "server tool results"
    return f"{block.type} blocks"


def join_text(blocks: list[Block], loss: Loss, sep: str = "\n\n") -> str:
    """The text of the blocks; anything that is not text is lost."""
    texts = []
    for block in blocks:
        if isinstance(block, Text):
            texts.append(block.text)
        else:
            loss.drop(block)
    return sep.join(texts)


def tool_kinds(tools: list[Tool]) -> dict[str, str]:
    return {t.name: t.kind for t in tools}


def arguments_object(call: ToolCall, kinds: dict[str, str], tally: Tally) -> dict[str, Any]:
    if kinds.get(call.name) == "custom":
        tally.converted["freeform tool calls (as {input})"] += 1
        return {"input": call.arguments_raw}
    if isinstance(call.arguments, dict):
        return call.arguments
    tally.converted["non-object tool arguments (as {input})"] += 1
    return {"input": call.arguments if call.arguments is not None else call.arguments_raw}


def function_tools(tools: list[Tool], tally: Tally) -> list[Tool]:
    """The client tools as plain functions; the API's built-in tools are dropped, freeform
    ones take a one-string schema, a namespace (Codex's `multi_agent_v1`: functions the
    client runs, grouped under one name) becomes its functions."""
    out = []
    for tool in tools:
        if tool.kind == "function":
            out.append(tool)
        elif tool.kind == "namespace" and (inner := namespace_functions(tool)):
            tally.converted["namespace tools (as their functions)"] += 1
            out += inner
        elif tool.kind == "custom":
            tally.converted["freeform tools (as {input})"] += 1
            out.append(Tool(name=tool.name, description=tool.description,
                            parameters=FREEFORM_SCHEMA))
        else:
            tally.dropped["built-in tools"] += 1
    return out


def namespace_functions(tool: Tool) -> list[Tool]:
    """The function tools inside a Responses `namespace` tool (its spec keeps `tools`)."""
    inner = (tool.parameters or {}).get("tools") if isinstance(tool.parameters, dict) else None
    return [Tool(name=t["name"], description=t.get("description"),
                 parameters=t.get("parameters"))
            for t in inner or () if isinstance(t, dict) and t.get("name")
            and t.get("type", "function") == "function"]


def meta(conversation: Any) -> dict[str, Any]:
    """Where a line came from, for --keep-extras."""
    final = conversation.final
    return {
        "session_id": conversation.data.session.id,
        "thread_id": conversation.thread.id,
        "segment": conversation.segment,
        "seq": final.seq,
        "dialect": final.dialect,
        "harness": conversation.data.session.harness,
        "model": (final.response and final.response.model) or final.request.model,
        "reward": conversation.data.reward,
    }
