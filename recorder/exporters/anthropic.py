"""`anthropic`: Messages-native JSONL, one line per conversation (thread segment).

A line is `{"system": [text blocks], "tools": [...], "messages": [...]}`: exactly the fields of
a Messages API request body that hold the conversation, so a line validates as the SDK's
request types and can be replayed. Messages alternate as the API wants them: each run of
user-side turns (user text, tool results) is one `user` message with its `tool_result`
blocks first; `system`-role turns inside the history stay `system` messages.

Thinking: Anthropic's `thinking` blocks keep their `signature`, `redacted_thinking` its data;
thinking recorded from another API (Gemini thoughts, OpenAI reasoning) has no signature the
Messages API would accept, so it is dropped and counted (x_extras with --keep-extras). The
same holds for server tool blocks and unknown blocks: verbatim when recorded from Anthropic,
dropped otherwise. Images and documents are referenced by URL when the record has one
(the record never copies media bytes). Tool call ids are made to fit `^[a-zA-Z0-9_-]+$`
(Gemini's `name#2` becomes `name_2`), results alike, so pairs still match.
"""

from __future__ import annotations

import re
from typing import Any

from forge_record.exporters.base import Tally
from forge_record.exporters.convert import (
    EXTRAS_KEY,
    META_KEY,
    Loss,
    arguments_object,
    function_tools,
    meta,
    tool_kinds,
)
from forge_record.exporters.units import Conversation, ConversationExporter
from forge_record.records import Block, Media, Other, Reasoning, Text, Tool, ToolCall, ToolResult

NATIVE = "anthropic.messages"
_ID_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


class Exporter(ConversationExporter):
    def to_line(self, conversation: Conversation) -> dict[str, Any] | None:
        return to_line(conversation, self.options.keep_extras, self.tally)


def to_line(conversation: Conversation, keep: bool, tally: Tally) -> dict[str, Any]:
    convert = _Converter(conversation, keep, tally)
    line: dict[str, Any] = {}
    system = [b for b in (convert.block(x, "system") for x in conversation.system) if b]
    if system:
        line["system"] = system
    tools = convert.tools(conversation.tools)
    if tools:
        line["tools"] = tools
    line["messages"] = convert.messages()
    if keep:
        line[META_KEY] = meta(conversation)
    return line


def _side(role: str) -> str:
    return {"tool": "user", "developer": "system"}.get(role, role)


class _Converter:
    def __init__(self, conversation: Conversation, keep: bool, tally: Tally) -> None:
        self.conversation = conversation
        self.native = conversation.final.dialect == NATIVE
        self.kinds = tool_kinds(conversation.tools)
        self.keep = keep
        self.tally = tally
        self.loss = Loss(tally, keep)

    def messages(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in self.conversation.messages:
            role = _side(message.role)
            self.loss = Loss(self.tally, self.keep)
            blocks = [b for b in (self.block(x, role) for x in message.content) if b]
            if not blocks:
                continue
            if out and out[-1]["role"] == role and role != "system":
                out[-1]["content"] += blocks
                if self.loss.kept:
                    out[-1].setdefault(EXTRAS_KEY, []).extend(self.loss.kept)
            else:
                out.append(self.loss.attach({"role": role, "content": blocks}))
        for message in out:
            if message["role"] == "user":  # tool results must open the user turn
                message["content"].sort(key=lambda b: b["type"] != "tool_result")
        return out

    def block(self, block: Block, role: str) -> dict[str, Any] | None:
        match block:
            case Text(text=text, citations=citations):
                if citations:
                    self.tally.dropped["citations"] += 1
                return {"type": "text", "text": text} if text else None
            case Reasoning() if self.native and role == "assistant":
                return self._thinking(block)
            case ToolCall(server=False) if role == "assistant":
                return {"type": "tool_use", "id": _safe_id(block.id, self.tally),
                        "name": block.name, "input": arguments_object(block, self.kinds,
                                                                      self.tally)}
            case ToolCall(server=True) if self.native:
                return {"type": "server_tool_use", "id": block.id, "name": block.name,
                        "input": block.arguments if block.arguments is not None else {}}
            case ToolResult() if role == "user":
                return self._tool_result(block)
            case ToolResult(name=str(kind)) if self.native and role == "assistant":
                data = block.content[0].data if block.content else None
                return {"type": kind, "tool_use_id": block.tool_call_id, "content": data}
            case Media(url=str(url)) if url.startswith(("https://", "http://")):
                return {"type": block.type, "source": {"type": "url", "url": url}}
            case Other(data=dict(data)) if self.native:
                return data
        self.loss.drop(block)
        return None

    def _thinking(self, block: Reasoning) -> dict[str, Any] | None:
        if block.encrypted and not block.text:
            return {"type": "redacted_thinking", "data": block.encrypted}
        if block.signature:
            return {"type": "thinking", "thinking": block.text, "signature": block.signature}
        self.tally.dropped["unsigned thinking"] += 1
        return None

    def _tool_result(self, result: ToolResult) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "tool_result",  # a client tool's result
                               "tool_use_id": _safe_id(result.tool_call_id, self.tally)}
        content = [b for b in (self.block(x, "result") for x in result.content) if b]
        if content:
            out["content"] = content
        if result.is_error:
            out["is_error"] = True
        return out

    def tools(self, tools: list[Tool]) -> list[dict[str, Any]]:
        out = []
        for tool in function_tools(tools, self.tally) if not self.native else tools:
            if tool.kind in ("function", "custom"):
                schema = tool.parameters if tool.kind == "function" else None
                entry = {"name": tool.name, "input_schema": schema or {"type": "object"}}
                if tool.description:
                    entry["description"] = tool.description
                out.append(entry)
            else:  # a built-in tool recorded from Anthropic: its spec, as it was sent
                out.append({"type": tool.kind, "name": tool.name, **(tool.parameters or {})})
        return out


def _safe_id(call_id: str, tally: Tally) -> str:
    safe = _ID_UNSAFE.sub("_", call_id) or "call"
    if safe != call_id:
        tally.converted["tool call ids (made safe)"] += 1
    return safe
