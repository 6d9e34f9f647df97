"""A Responses request as a Chat Completions request: the request half of the Responses
bridge (forge_record.bridge.responses).

What maps (docs/ENGINES.md says the same for users):

- `instructions` -> the first message, role system; `developer` and `system` message items ->
  system messages where they stand (chat templates know no developer role).
- `message` items -> messages of their role; a single text part becomes the content string,
  several parts a list of chat parts (`input_image` -> `image_url`); `refusal` parts are text.
- A run of model items (assistant messages, `function_call`, `custom_tool_call`) -> one
  assistant message: its text, then its `tool_calls`. `function_call_output` and
  `custom_tool_call_output` -> `tool` messages.
- `reasoning` items are dropped: encrypted ones cannot be read, and a summary is not what the
  model sampled. The answer kept for `previous_response_id` drops its reasoning too, so a
  context sent whole over HTTP and one chained over a WebSocket become the same messages.
- Tools: `function` -> function; `namespace` -> each of its functions, named
  `<namespace>__<name>`; `custom` (freeform, Codex's `apply_patch`) -> a function taking one
  string `input` (its grammar cannot be enforced). Server tools merely offered (`web_search`,
  which Codex always offers, `file_search`, ...) are left out of the engine's list, and named in
  `Translated.dropped` so the record says so; a request that needs one (a call of it in the
  input, `tool_choice` naming it) is Untranslatable.
- `tool_choice` (auto/none/required, a named function or custom tool), `max_output_tokens` ->
  `max_tokens`, `temperature`, `top_p`, `parallel_tool_calls`, `text.format` ->
  `response_format`. Tolerated and not sent: `store`, `include`, `prompt_cache_key`,
  `reasoning`, `metadata`, `user`, `service_tier`, `client_metadata`, `text.verbosity`, ... .
  Refused: `background`, `conversation`, `prompt` (server-side state or templates).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from forge_record.bridge.base import Untranslatable

NAMESPACE_SEP = "__"
_MODEL_ITEMS = {"message", "function_call", "custom_tool_call"}
_OUTPUTS = {"function_call_output", "custom_tool_call_output"}
_REFUSED_FIELDS = ("background", "conversation", "prompt")
_SYSTEM_ROLES = {"system", "developer"}


@dataclass
class ToolNames:
    """How an engine's tool call goes back to the agent: which chat function names stand for
    freeform tools, and which for a namespace's functions."""

    custom: set[str] = field(default_factory=set)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)  # -> (namespace, name)


@dataclass
class Translated:
    chat: dict[str, Any]  # the Chat Completions request
    context: list[dict[str, Any]]  # its messages but the instructions (kept for chaining)
    names: ToolNames
    dropped: list[str]  # server tools offered but not sent to the engine


def translate(request: dict[str, Any], model: str | None,
              history: list[dict[str, Any]]) -> Translated:
    """The chat request for a Responses `request` whose earlier context (from
    `previous_response_id`) is `history`. Raises Untranslatable."""
    for name in _REFUSED_FIELDS:
        if request.get(name) not in (None, False):
            raise Untranslatable(f"the bridge cannot send `{name}` to a chat engine")
    names, dropped = ToolNames(), []
    tools = chat_tools(request.get("tools") or [], names, dropped)
    context = history + input_messages(request.get("input"))
    system = _text(request.get("instructions"))
    chat: dict[str, Any] = {
        "model": model or request.get("model"),
        "messages": ([{"role": "system", "content": system}] if system else []) + context,
    }
    if tools:
        chat["tools"] = tools
    if (choice := request.get("tool_choice")) is not None:
        chat["tool_choice"] = tool_choice(choice, names)
    for ours, theirs in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"),
                         ("top_p", "top_p"), ("parallel_tool_calls", "parallel_tool_calls")):
        if request.get(ours) is not None:
            chat[theirs] = request[ours]
    if (form := response_format((request.get("text") or {}).get("format"))) is not None:
        chat["response_format"] = form
    return Translated(chat, context, names, dropped)


# --- tools -------------------------------------------------------------------------------


def chat_tools(tools: list[Any], names: ToolNames, dropped: list[str]) -> list[dict]:
    out = []
    for tool in tools:
        kind = tool.get("type")
        if kind == "function":
            out.append(_function(tool["name"], tool))
        elif kind == "custom":
            names.custom.add(tool["name"])
            out.append(_function(tool["name"], {"description": tool.get("description"),
                                                "parameters": _FREEFORM}))
        elif kind == "namespace":
            for inner in tool.get("tools") or ():
                if inner.get("type", "function") != "function":
                    raise Untranslatable(f"a {inner.get('type')} tool in namespace "
                                         f"{tool.get('name')!r}")
                chat_name = f"{tool['name']}{NAMESPACE_SEP}{inner['name']}"
                names.namespaced[chat_name] = (tool["name"], inner["name"])
                out.append(_function(chat_name, inner))
        else:  # a tool the API runs itself: the engine cannot
            dropped.append(str(kind))
    return out


_FREEFORM = {"type": "object", "properties": {"input": {"type": "string"}},
             "required": ["input"], "additionalProperties": False}


def _function(name: str, tool: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def tool_choice(choice: Any, names: ToolNames) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise Untranslatable(f"tool_choice {orjson.dumps(choice).decode()}")


def response_format(form: Any) -> dict[str, Any] | None:
    if not isinstance(form, dict) or form.get("type") in (None, "text"):
        return None
    if form.get("type") == "json_object":
        return {"type": "json_object"}
    if form.get("type") == "json_schema":
        schema = {k: form[k] for k in ("name", "schema", "strict", "description") if k in form}
        return {"type": "json_schema", "json_schema": schema}
    raise Untranslatable(f"text.format of type {form.get('type')!r}")


# --- input items -------------------------------------------------------------------------


def input_messages(items: Any) -> list[dict[str, Any]]:
    """The `input` (a string or items) as chat messages (see the module docstring)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None  # the assistant message a run of model items builds
    for item in items or ():
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "reasoning":
            continue  # dropped (module docstring); it does not end the model's run
        if kind in _MODEL_ITEMS and (kind != "message" or item.get("role") == "assistant"):
            turn = _model_item(item, kind, turn, messages)
            continue
        turn = None
        if kind == "message":
            messages.append(_message(item))
        elif kind in _OUTPUTS:
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": _output(item.get("output"))})
        else:
            raise Untranslatable(f"an input item of type {kind!r}")
    return messages


def _model_item(item: dict[str, Any], kind: str, turn: dict[str, Any] | None,
                messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Add one model item to the assistant message of its run; returns that message."""
    if turn is None or (kind == "message" and turn.get("tool_calls")):
        turn = {"role": "assistant", "content": None}
        messages.append(turn)
    if kind == "message":
        text = _text(item.get("content"))
        turn["content"] = (turn["content"] or "") + text if text else turn["content"]
        return turn
    if kind == "function_call":
        name = _chat_name(item.get("namespace"), item.get("name"))
        call = _call(item.get("call_id"), name, item.get("arguments") or "")
    else:  # custom_tool_call: the freeform input as the one argument
        call = _call(item.get("call_id"), item.get("name"),
                     orjson.dumps({"input": item.get("input") or ""}).decode())
    turn.setdefault("tool_calls", []).append(call)
    return turn


def _chat_name(namespace: Any, name: Any) -> str:
    return f"{namespace}{NAMESPACE_SEP}{name}" if namespace else str(name)


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments).decode()
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


def _message(item: dict[str, Any]) -> dict[str, Any]:
    role = item.get("role") or "user"
    content = item.get("content")
    if role in _SYSTEM_ROLES:
        return {"role": "system", "content": _text(content)}
    if isinstance(content, str):
        return {"role": role, "content": content}
    parts = [_part(p) for p in content or ()]
    if len(parts) == 1 and parts[0]["type"] == "text":
        return {"role": role, "content": parts[0]["text"]}
    return {"role": role, "content": parts}


def _part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": part.get("text") or ""}
    if kind == "refusal":
        return {"type": "text", "text": part.get("refusal") or ""}
    if kind == "input_image" and part.get("image_url"):
        image = {"url": part["image_url"]}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise Untranslatable(f"a content part of type {kind!r}")


def _text(content: Any) -> str:
    """Text content (a string, or text parts joined by a newline, as vLLM joins them)."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        block = _part(part)
        if block["type"] != "text":
            raise Untranslatable(f"a {part.get('type')} part where only text can stand")
        texts.append(block["text"])
    return "\n".join(texts)


def _output(output: Any) -> str | list[dict[str, Any]]:
    """A tool output: a string, or parts (text only, or with images)."""
    if output is None or isinstance(output, str):
        return output or ""
    parts = [_part(p) for p in output]
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts
