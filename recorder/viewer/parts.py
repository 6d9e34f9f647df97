"""Record blocks as the viewer shows them: `Part`s of plain text, folded when long.

Contract: `part_of(block, role, names)` turns any record block (forge_record.records) into
a `Part` whose `text` holds all its recorded content as a plain str (tool arguments as
pretty JSON, tool results as their text with media described, unknown blocks as JSON); it
never raises. `names` maps tool call ids to tool names (`tool_names`), so a result can say
which tool it answers. `folded` is decided here once so that every renderer folds the same
parts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from forge_record.records import Block, Exchange, Media, Reasoning, Text, ToolCall, ToolResult

FOLD_LINES = 12  # a part with more lines than this, or more than FOLD_CHARS, is folded
FOLD_CHARS = 2000


@dataclass(kw_only=True, slots=True)
class Part:
    """One block. kind: text, thinking, tool_call, tool_result, media, other. For tool calls
    `text` is the arguments, for results what came back; `ref` is the tool call id."""

    kind: str
    text: str = ""
    name: str | None = None
    ref: str | None = None
    error: bool = False
    folded: bool = False


def part_of(block: Block, role: str, names: dict[str, str]) -> Part:
    match block:
        case Text(text=text):
            part = Part(kind="text", text=text)
        case Reasoning(text=text, encrypted=encrypted):
            part = Part(kind="thinking", text=text or ("[encrypted]" if encrypted else ""))
        case ToolCall():
            part = Part(kind="tool_call", text=_arguments(block), name=block.name, ref=block.id,
                        error=block.parse_error)
        case ToolResult():
            part = Part(kind="tool_result", text=_result_text(block), ref=block.tool_call_id,
                        name=block.name or names.get(block.tool_call_id), error=block.is_error)
        case Media():
            part = Part(kind="media", text=_media(block))
        case _:
            part = Part(kind="other", text=to_json(getattr(block, "data", None)))
    part.folded = _folds(part, role)
    return part


def _folds(part: Part, role: str) -> bool:
    """Tool calls, tool results and anything the assistant did not write fold when long;
    the assistant's own text and thinking never do (that is what people came to read)."""
    if part.kind in ("text", "thinking") and role == "assistant":
        return False
    return len(part.text) > FOLD_CHARS or part.text.count("\n") >= FOLD_LINES


def _arguments(call: ToolCall) -> str:
    if call.arguments is None or call.parse_error:
        return call.arguments_raw
    if isinstance(call.arguments, str):
        return call.arguments
    return to_json(call.arguments)


def _result_text(result: ToolResult) -> str:
    lines = []
    for b in result.content:
        if isinstance(b, Text):
            lines.append(b.text)
        elif isinstance(b, Media):
            lines.append(_media(b))
        else:
            lines.append(to_json(getattr(b, "data", None) or b.type))
    return "\n".join(lines)


def _media(m: Media) -> str:
    size = f"{m.size:,} bytes" if m.size is not None else "size unknown"
    return f"[{m.type} {m.media_type or ''} {size}{' ' + m.url if m.url else ''}]"


def to_json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode()


def tool_names(exchanges: list[Exchange]) -> dict[str, str]:
    """tool call id -> tool name, over every call the session's records mention."""
    names: dict[str, str] = {}
    for ex in exchanges:
        blocks = [b for m in (ex.request.messages if ex.request else []) for b in m.content]
        blocks += ex.response.content if ex.response else []
        names.update((b.id, b.name) for b in blocks if isinstance(b, ToolCall))
    return names


