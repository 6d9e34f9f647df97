"""OpenAI shapes as record blocks: Responses API items, content parts, tools; shared helpers.

Used by both OpenAI dialects and by whoever rebuilds a Responses context from raw items (the
WebSocket path). Pure functions over parsed JSON; they raise only the `base.SHAPE_ERRORS` a
malformed value causes, and callers decide whether that is a `DecodeError` or a flag.

Item -> block mapping (docs/records.md says the same for users):

- `message` content: `input_text`/`output_text` -> Text (`annotations` -> citations);
  `refusal` -> Other `{"type": "refusal", "refusal": ...}` (a refusal is not the answer, so it
  is kept apart from Text); `input_image`/`input_file` -> Media named by sha256; other parts ->
  Other verbatim.
- `function_call` -> ToolCall(id=call_id, arguments parsed from the JSON string, raw kept;
  parse_error when it is not JSON). `custom_tool_call` (freeform, e.g. Codex `apply_patch`) ->
  ToolCall(arguments=None, arguments_raw=input, parse_error False); the freeform kind shows
  in `Response.extras["output_items"]` and as kind "custom" in `Request.tools`.
- `reasoning` -> Reasoning(text = summary texts then reasoning_text contents, joined by a
  blank line; encrypted = encrypted_content).
- `web_search_call` -> ToolCall(server=True, id=item id, name "web_search", arguments=action).
- `function_call_output` / `custom_tool_call_output` -> ToolResult(tool_call_id=call_id).
- every other item type -> Other with the item verbatim.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

import orjson

from forge_record.decoders.base import Reused
from forge_record.records import (
    Block,
    Media,
    Message,
    Other,
    Reasoning,
    Request,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    Usage,
)

# Items the model produced: in a request's input, a run of them is one assistant Message,
# as a Response's content holds every output item of one call.
MODEL_ITEMS = {"reasoning", "function_call", "custom_tool_call", "web_search_call",
               "file_search_call", "computer_call", "local_shell_call", "shell_call",
               "apply_patch_call", "mcp_call", "code_interpreter_call",
               "image_generation_call", "tool_search_call"}
TOOL_OUTPUTS = {"function_call_output", "custom_tool_call_output"}
_RESPONSES_OWN_FIELDS = {"model", "instructions", "input", "tools", "stream"}


# --- shared helpers ----------------------------------------------------------------------


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def parse_arguments(raw: str) -> tuple[Any, bool]:
    """(arguments, parse_error) for a JSON arguments string. Empty means no arguments."""
    if not raw:
        return None, False
    try:
        return orjson.loads(raw), False
    except orjson.JSONDecodeError:
        return None, True


def function_call(call_id: str, name: str, raw: Any) -> ToolCall:
    raw = raw if isinstance(raw, str) else dumps(raw)  # some servers send an object
    arguments, bad = parse_arguments(raw)
    return ToolCall(id=call_id or "", name=name or "", arguments=arguments,
                    arguments_raw=raw, parse_error=bad)


def media(kind: str, url: str | None, *, media_type: str | None = None) -> Media:
    """An image or file named by sha256: of its bytes for a data: URL, else of the
    reference (URL or file id), whose bytes are elsewhere."""
    url = url or ""
    if url.startswith("data:"):
        header, _, payload = url[5:].partition(",")
        media_type = header.split(";")[0] or media_type
        data = _b64(payload) if header.endswith(";base64") else payload.encode()
        return Media(type=kind, media_type=media_type, size=len(data),
                     sha256=hashlib.sha256(data).hexdigest())
    return Media(type=kind, media_type=media_type, url=url or None,
                 sha256=hashlib.sha256(url.encode()).hexdigest() if url else None)


def _b64(data: str) -> bytes:
    try:
        return base64.b64decode(data)
    except (binascii.Error, ValueError):
        return data.encode()  # still names the content, if not the decoded bytes


def refusal(text: str) -> Other:
    return Other(data={"type": "refusal", "refusal": text})


def token_usage(raw: Any, input_key: str, output_key: str) -> Usage:
    """An OpenAI usage object as Usage. Chat Completions counts `prompt_tokens` and
    `completion_tokens`, the Responses API `input_tokens` and `output_tokens`; both keep the
    finer counts in `<key>_details`. `input_tokens` excludes the cached tokens, as records.Usage
    says."""
    if not isinstance(raw, dict):
        return Usage()
    total, cached = raw.get(input_key), _detail(raw, f"{input_key}_details", "cached_tokens")
    uncached = total - cached if isinstance(total, int) and isinstance(cached, int) else total
    return Usage(input_tokens=uncached, output_tokens=raw.get(output_key),
                 cache_read_tokens=cached,
                 cache_write_tokens=_detail(raw, f"{input_key}_details", "cache_write_tokens"),
                 reasoning_tokens=_detail(raw, f"{output_key}_details", "reasoning_tokens"),
                 raw=raw)


def _detail(raw: dict[str, Any], group: str, name: str) -> Any:
    details = raw.get(group)
    return details.get(name) if isinstance(details, dict) else None


# --- content parts -----------------------------------------------------------------------


def part_block(part: dict[str, Any]) -> Block:
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
        return Text(text=part.get("text") or "", citations=part.get("annotations") or None)
    if kind == "refusal":
        return refusal(part.get("refusal") or "")
    if kind == "input_image":
        return media("image", part.get("image_url") or part.get("file_id"))
    if kind == "input_file":
        ref = part.get("file_data") or part.get("file_url") or part.get("file_id")
        return media("document", ref)
    return Other(data=part)


def content_blocks(content: Any) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [Text(text=content)] if content else []
    return [part_block(p) for p in content]


# --- Responses items ---------------------------------------------------------------------


def reasoning(item: dict[str, Any]) -> Reasoning:
    texts = [p.get("text") or "" for p in item.get("summary") or ()]
    texts += [p.get("text") or "" for p in item.get("content") or ()]
    return Reasoning(text="\n\n".join(t for t in texts if t),
                     encrypted=item.get("encrypted_content") or None)


def item_blocks(item: dict[str, Any]) -> list[Block]:
    """The blocks one Responses item stands for (a message item gives its content)."""
    kind = item.get("type")
    if kind == "message" or (kind is None and "role" in item):
        return content_blocks(item.get("content"))
    if kind == "function_call":
        return [function_call(item.get("call_id"), item.get("name"), item.get("arguments"))]
    if kind == "custom_tool_call":
        return [ToolCall(id=item.get("call_id") or "", name=item.get("name") or "",
                         arguments_raw=item.get("input") or "")]
    if kind == "reasoning":
        return [reasoning(item)]
    if kind == "web_search_call":
        action = item.get("action")
        return [ToolCall(id=item.get("id") or "", name="web_search", arguments=action,
                         arguments_raw=dumps(action) if action is not None else "",
                         server=True)]
    if kind in TOOL_OUTPUTS:
        return [ToolResult(tool_call_id=item.get("call_id") or "",
                           content=content_blocks(item.get("output")))]
    return [Other(data=item)]


def input_messages(items: Any) -> list[Message]:
    """A Responses `input` (a string or a list of items) as messages. A message item is one
    Message; a run of model-produced items (assistant messages, reasoning, calls) is one
    assistant Message; each tool output is a "tool" Message; other items are a "user"
    Message holding Other."""
    if isinstance(items, str):
        return [Message(role="user", content=[Text(text=items)])]
    messages: list[Message] = []
    model_run = False  # the last Message is a run of model-produced items
    for item in items or ():
        kind = item.get("type")
        is_message = kind == "message" or (kind is None and "role" in item)
        role = item.get("role") if is_message else None
        from_model = role == "assistant" or kind in MODEL_ITEMS
        if from_model and model_run:
            messages[-1].content.extend(item_blocks(item))
            continue
        if from_model:
            role = "assistant"
        elif kind in TOOL_OUTPUTS:
            role = "tool"
        messages.append(Message(role=role or "user", content=item_blocks(item)))
        model_run = from_model
    return messages


def _system(instructions: Any) -> list[Block]:
    if isinstance(instructions, list):  # a response object may echo them as input items
        return [b for m in input_messages(instructions) for b in m.content]
    return content_blocks(instructions)


def responses_tool(raw: dict[str, Any]) -> Tool:
    kind = raw.get("type") or "function"
    if kind == "function":
        return Tool(name=raw.get("name") or "", description=raw.get("description"),
                    parameters=raw.get("parameters"))
    if kind == "custom":  # freeform: `format` (text or a grammar) stands for the schema
        return Tool(kind="custom", name=raw.get("name") or "",
                    description=raw.get("description"), parameters=raw.get("format"))
    rest = {k: v for k, v in raw.items() if k not in ("type", "name")}
    return Tool(kind=kind, name=raw.get("name") or kind, parameters=rest or None)


_TOOLS = Reused(responses_tool)


def parse_responses_request(data: dict[str, Any]) -> Request:
    """A Responses request body, or a WebSocket `response.create` payload, as a Request.
    `instructions` is the system prompt; `input` items are messages; every other field
    (`previous_response_id`, `reasoning`, `include`, `store`, `type`, `generate`, ...) is
    kept untouched in `parameters`. Raises one of SHAPE_ERRORS on a malformed body."""
    return Request(
        model=data.get("model"),
        system=_system(data.get("instructions")),
        tools=_TOOLS(data.get("tools") or []),
        messages=input_messages(data.get("input")),
        stream=bool(data.get("stream")),
        parameters={k: v for k, v in data.items() if k not in _RESPONSES_OWN_FIELDS},
    )


def output_metadata(item: dict[str, Any]) -> dict[str, Any]:
    """What an output item says beyond its blocks: its type, ids, status, role, phase."""
    return {k: item[k] for k in _ITEM_META_FIELDS if item.get(k) is not None}


_ITEM_META_FIELDS = ("type", "id", "call_id", "status", "role", "phase", "namespace")
