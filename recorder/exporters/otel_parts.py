"""Normalized records as OpenTelemetry GenAI message parts and OTLP JSON values.

The GenAI semantic conventions (v1.41 JSON schemas: gen-ai-input-messages,
gen-ai-output-messages, gen-ai-system-instructions, gen-ai-tool-definitions) describe
messages as `{"role", "parts": [...]}` with parts `text`, `reasoning`, `tool_call`,
`tool_call_response`, `server_tool_call`, `server_tool_call_response`, `uri`, and generic
parts of any other `type`. Media bytes are never in a record, so an image without a URL is a
generic part naming its sha256. Finish reasons map to the schema's enum (stop, length,
content_filter, tool_call, error); one it does not know stays as the provider said it.
"""

from __future__ import annotations

from typing import Any

from forge_record.records import (
    Block,
    Media,
    Message,
    Other,
    Reasoning,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    block_to_dict,
)

_FINISH = {
    "end_turn": "stop", "stop": "stop", "STOP": "stop", "stop_sequence": "stop",
    "completed": "stop", "tool_use": "tool_call", "tool_calls": "tool_call",
    "function_call": "tool_call", "max_tokens": "length", "length": "length",
    "MAX_TOKENS": "length", "model_context_window_exceeded": "length",
    "refusal": "content_filter", "content_filter": "content_filter", "SAFETY": "content_filter",
    "RECITATION": "content_filter", "PROHIBITED_CONTENT": "content_filter",
}
_ROLES = {"developer": "system"}


def finish_reason(stop_reason: str | None, failed: bool) -> str:
    if failed:
        return "error"
    return _FINISH.get(stop_reason or "", stop_reason or "stop")


def part(block: Block, model_turn: bool = False) -> dict[str, Any]:
    """One part; `model_turn` says the block is in the model's own turn, where a tool result
    is one the API ran itself (a server tool)."""
    match block:
        case Text(text=text):
            return {"type": "text", "content": text}
        case Reasoning(text=text, encrypted=enc):
            return {"type": "reasoning", "content": text or ("[encrypted]" if enc else "")}
        case ToolCall(server=True):
            return {"type": "server_tool_call", "id": block.id, "name": block.name,
                    "server_tool_call": {"type": block.name, "arguments": block.arguments}}
        case ToolCall():
            args = block.arguments if block.arguments is not None else block.arguments_raw
            return {"type": "tool_call", "id": block.id, "name": block.name, "arguments": args}
        case ToolResult() if model_turn:
            return {"type": "server_tool_call_response", "id": block.tool_call_id,
                    "server_tool_call_response": {"type": block.name or "server_tool",
                                                  "content": [block_to_dict(b)
                                                              for b in block.content]}}
        case ToolResult():
            return {"type": "tool_call_response", "id": block.tool_call_id,
                    "response": result_text(block)}
        case Media(url=str(url)):
            return {"type": "uri", "modality": _modality(block), "mime_type": block.media_type,
                    "uri": url}
        case Media():
            return {"type": block.type, "mime_type": block.media_type, "sha256": block.sha256,
                    "size": block.size}
        case Other(data=data):
            kind = data.get("type") if isinstance(data, dict) else None
            return {"type": kind if isinstance(kind, str) else "other", "content": data}
    return {"type": "other", "content": block_to_dict(block)}


def result_text(result: ToolResult) -> str | list[dict[str, Any]]:
    if all(isinstance(b, Text) for b in result.content):
        return "\n".join(b.text for b in result.content)
    return [part(b) for b in result.content]


def _modality(media: Media) -> str:
    kind = (media.media_type or "").partition("/")[0]
    return kind if kind in ("image", "video", "audio") else media.type


def message(m: Message) -> dict[str, Any]:
    model_turn = m.role == "assistant"
    return {"role": _ROLES.get(m.role, m.role),
            "parts": [part(b, model_turn) for b in m.content]}


def tool_definition(tool: Tool) -> dict[str, Any]:
    out: dict[str, Any] = {"type": tool.kind, "name": tool.name}
    if tool.description:
        out["description"] = tool.description
    if tool.parameters is not None:
        out["parameters"] = tool.parameters
    return out


# --- OTLP JSON values --------------------------------------------------------------------


def any_value(value: Any) -> dict[str, Any]:
    """An OTLP AnyValue in the protobuf JSON mapping (int64 as a decimal string)."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    """OTLP key/value pairs; None values are left out, as OTel leaves unset attributes."""
    return [{"key": k, "value": any_value(v)} for k, v in values.items() if v is not None]


def nanos(seconds: float | None) -> str:
    return str(int(round((seconds or 0.0) * 1e9)))
