"""`openai`: OpenAI's chat fine-tuning JSONL, one line per conversation (thread segment).

A line is `{"messages": [...], "tools": [...], "parallel_tool_calls": bool}` (docs/EXPORT.md
has it field by field). Messages: the system prompt as one `system` message; `user`
messages with string content (an array with `image_url` parts only when an image has a URL:
the record keeps image bytes out of it); each tool result as a `tool` message with its
`tool_call_id` and string content, placed before the user text that came with it; `assistant`
messages with string content, `tool_calls` (`arguments` a JSON string) and `weight` (1 for a
turn this thread's model produced, 0 for one it did not; see pairing). Reasoning cannot go
into this format: it is dropped and counted, or with --keep-extras kept as
`reasoning_content` (the field vLLM and DeepSeek use). Server-run tools, documents, images
without a URL and unknown blocks are dropped likewise (`x_extras` with --keep-extras).
"""

from __future__ import annotations

from typing import Any

from forge_record.exporters.base import Tally, dumps
from forge_record.exporters.convert import (
    META_KEY,
    Loss,
    arguments_object,
    function_tools,
    join_text,
    meta,
    tool_kinds,
)
from forge_record.exporters.units import Conversation, ConversationExporter
from forge_record.records import Block, Media, Message, Other, Reasoning, Text, ToolCall, ToolResult


class Exporter(ConversationExporter):
    skip_reason = "segments with nothing to train on"

    def to_line(self, conversation: Conversation) -> dict[str, Any] | None:
        return to_line(conversation, self.options.keep_extras, self.tally)


def to_line(conversation: Conversation, keep: bool, tally: Tally) -> dict[str, Any] | None:
    kinds = tool_kinds(conversation.tools)
    messages: list[dict[str, Any]] = []
    loss = Loss(tally, keep)
    system = join_text(conversation.system, loss)
    if system:
        messages.append(loss.attach({"role": "system", "content": system}))
    for message, trained in zip(conversation.messages, conversation.trained, strict=True):
        messages += _messages(message, trained, kinds, keep, tally)
    if not messages or messages[-1]["role"] != "assistant" or not messages[-1].get("weight"):
        return None
    line: dict[str, Any] = {"messages": messages}
    tools = function_tools(conversation.tools, tally)
    if tools:
        line["tools"] = [_tool(t) for t in tools]
        line["parallel_tool_calls"] = _parallel(conversation, messages)
    if keep:
        line[META_KEY] = meta(conversation)
    return line


def _messages(message: Message, trained: bool, kinds, keep: bool, tally: Tally) -> list[dict]:
    if message.role == "assistant":
        out = _assistant(message.content, trained, kinds, keep, tally)
        return [out] if out else []
    loss = Loss(tally, keep)
    results = [b for b in message.content if isinstance(b, ToolResult)]
    rest = [b for b in message.content if not isinstance(b, ToolResult)]
    out = [_tool_message(r, keep, tally) for r in results]
    role = "system" if message.role in ("system", "developer") else "user"
    content = _user_content(rest, loss) if role == "user" else join_text(rest, loss)
    if content:
        out.append(loss.attach({"role": role, "content": content}))
    elif loss.kept and out:
        loss.attach(out[-1])
    return out


def _assistant(blocks: list[Block], trained: bool, kinds, keep: bool, tally: Tally) -> dict | None:
    loss = Loss(tally, keep)
    texts, calls, reasoning, refusals = [], [], [], []
    for block in blocks:
        match block:
            case Text(text=text):
                texts.append(text)
            case ToolCall(server=False):
                args = arguments_object(block, kinds, tally)
                calls.append({"id": block.id, "type": "function",
                              "function": {"name": block.name, "arguments": dumps(args)}})
            case Reasoning(text=text) if keep and text:
                tally.converted["reasoning (as reasoning_content)"] += 1
                reasoning.append(text)
            case Other(data={"type": "refusal", "refusal": str(text)}):
                refusals.append(text)
            case _:
                loss.drop(block)
    if not texts and not calls and not refusals:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    if refusals:
        message["refusal"] = "\n".join(refusals)
    if reasoning:
        message["reasoning_content"] = "\n\n".join(reasoning)
    message["weight"] = 1 if trained else 0
    return loss.attach(message)


def _tool_message(result: ToolResult, keep: bool, tally: Tally) -> dict[str, Any]:
    loss = Loss(tally, keep)
    content = join_text(result.content, loss, sep="\n")
    if result.is_error:  # a tool message has no field for it
        loss.lose("tool error flags", {"type": "tool_result", "is_error": True})
    return loss.attach({"role": "tool", "tool_call_id": result.tool_call_id, "content": content})


def _user_content(blocks: list[Block], loss: Loss) -> str | list[dict[str, Any]]:
    """A string, or content parts when an image can be referenced by its URL."""
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, Text):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, Media) and block.type == "image" and _is_web_url(block.url):
            parts.append({"type": "image_url", "image_url": {"url": block.url}})
        else:
            loss.drop(block)
    if all(p["type"] == "text" for p in parts):
        return "\n\n".join(p["text"] for p in parts)
    return parts


def _is_web_url(url: str | None) -> bool:
    return bool(url) and url.startswith(("https://", "http://"))


def _tool(tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    if tool.parameters is not None:
        function["parameters"] = tool.parameters
    return {"type": "function", "function": function}


def _parallel(conversation: Conversation, messages: list[dict[str, Any]]) -> bool:
    """What the request said, else the API's default (true); true whenever a turn made
    several calls at once, since the example would contradict false."""
    if any(len(m.get("tool_calls") or ()) > 1 for m in messages):
        return True
    params = conversation.final.request.parameters
    if isinstance(params.get("parallel_tool_calls"), bool):
        return params["parallel_tool_calls"]
    choice = params.get("tool_choice")
    if isinstance(choice, dict) and isinstance(choice.get("disable_parallel_tool_use"), bool):
        return not choice["disable_parallel_tool_use"]
    return True
