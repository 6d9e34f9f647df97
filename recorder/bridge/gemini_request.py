"""A Gemini `generateContent` request as a Chat Completions request (the bridge's way in).

- `systemInstruction` (a `Content`, or a bare string) is the system message, its text parts
  joined by "\\n".
- `contents`: role `user` (or the old `function`) is a user message, `model` an assistant
  message. A user content's `functionResponse` parts become `tool` messages in part order, the
  text around them user messages (Gemini CLI sends a tool answer alone in its content); the
  response object is dumped as JSON, so nothing of it is lost. A model content's text parts
  are its `content` (joined), its `thought` parts its `reasoning` (as the Anthropic bridge
  keeps thinking), its `functionCall` parts its `tool_calls`. `thoughtSignature` is dropped.
- Call ids: the Gemini API sends none (Gemini CLI mints its own and sends them back, others
  do not). A call without one gets `call_<content index>_<call index>`: deterministic and
  fixed by its position, so the same history gives the same ids on every later call. A
  `functionResponse` answers the call of its own id when that call is open, else the first
  open call of its name in the last model turn (by order and name), else gets its own id.
- `inlineData`: an image is an `image_url` data URL, a text or JSON blob its decoded text;
  anything else, `fileData`, code execution parts and parts of a response are Untranslatable.
- `tools[].functionDeclarations` are functions: `parametersJsonSchema` is passed as it is,
  `parameters` (Gemini's OpenAPI-style `Schema`) is normalized to JSON Schema (upper-case
  types such as "OBJECT" lowered, `nullable` as a "null" type, int64 bounds sent as strings
  made numbers, `propertyOrdering` dropped). Server tools (`googleSearch`, `codeExecution`,
  `urlContext`, ...) are Untranslatable.
- `toolConfig.functionCallingConfig`: NONE -> "none", ANY -> "required" (one allowed name ->
  that function), AUTO and VALIDATED -> the engine's default (auto); `allowedFunctionNames`
  keeps only those tools.
- `generationConfig`: temperature, topP, topK, maxOutputTokens, stopSequences, seed,
  presence/frequency penalties carry over; `responseMimeType: application/json` is a JSON
  `response_format` (with `responseJsonSchema`/`responseSchema` a schema); `candidateCount`
  above 1, logprob asks, other modalities and any field not named here are Untranslatable;
  `thinkingConfig` and `mediaResolution` are hints the engine has no use for, dropped, as are
  `safetySettings` and `labels` at the top level.

Field names are read in either spelling (`camel`): protobuf JSON endpoints accept snake_case
and some clients send it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from forge_record.bridge.base import Untranslatable
from forge_record.decoders.gemini_parts import camel

_DROPPED = frozenset({"safetySettings", "labels", "model"})
_OWN = frozenset({"contents", "systemInstruction", "tools", "toolConfig", "generationConfig"})
_SAMPLING = {"temperature": "temperature", "topP": "top_p", "topK": "top_k",
             "maxOutputTokens": "max_tokens", "stopSequences": "stop", "seed": "seed",
             "presencePenalty": "presence_penalty", "frequencyPenalty": "frequency_penalty"}
_HINTS = frozenset({"thinkingConfig", "mediaResolution"})
_CONFIG_OWN = frozenset({"candidateCount", "responseMimeType", "responseJsonSchema",
                         "responseSchema", "responseModalities"})
_PART_IGNORED = frozenset({"thoughtSignature", "thought", "videoMetadata", "mediaResolution"})
_SCHEMA_INTS = frozenset({"minItems", "maxItems", "minLength", "maxLength", "minProperties",
                          "maxProperties"})


def chat_request(request: dict[str, Any], model: str) -> dict[str, Any]:
    """The Chat Completions request for a Gemini request body (raises Untranslatable)."""
    data = camel(request)
    unknown = sorted(set(data) - _OWN - _DROPPED)
    if unknown:
        raise Untranslatable(f"request field {unknown[0]!r} has no Chat Completions form")
    chat: dict[str, Any] = {"model": model, "messages": _messages(data)}
    tools, choice = _tools(data)
    if tools:
        chat["tools"] = tools
        if choice is not None:
            chat["tool_choice"] = choice
    chat.update(_config(camel(data.get("generationConfig") or {})))
    return chat


# --- messages ----------------------------------------------------------------------------


def _messages(data: dict[str, Any]) -> list[dict[str, Any]]:
    messages = []
    system = _system_text(data.get("systemInstruction"))
    if system:
        messages.append({"role": "system", "content": system})
    open_calls: list[tuple[str, str]] = []  # (id, name) of the last model turn's calls
    for index, raw in enumerate(data.get("contents") or ()):
        content = camel(raw)
        parts = [camel(p) for p in content.get("parts") or ()]
        if content.get("role") == "model":
            message, open_calls = _assistant(parts, index)
            messages.append(message)
        else:
            messages += _user(parts, index, open_calls)
    return messages


def _system_text(instruction: Any) -> str:
    if instruction is None or isinstance(instruction, str):
        return instruction or ""
    parts = [camel(p) for p in camel(instruction).get("parts") or ()]
    for part in parts:
        _refuse_unknown(part, "systemInstruction")
    return "\n".join(p["text"] for p in parts if isinstance(p.get("text"), str))


def _assistant(parts: list[dict], index: int) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    text, thought, calls = [], [], []
    for part in parts:
        if "functionCall" in part:
            call = camel(part["functionCall"])
            call_id = call.get("id") or f"call_{index}_{len(calls)}"
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": call.get("name", ""),
                                       "arguments": _dumps(call.get("args") or {})}})
        elif isinstance(part.get("text"), str):
            (thought if part.get("thought") else text).append(part["text"])
        else:
            _refuse_unknown(part, "a model turn")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if thought:
        message["reasoning"] = "".join(thought)
    if calls:
        message["tool_calls"] = calls
    return message, [(c["id"], c["function"]["name"]) for c in calls]


def _user(parts: list[dict], index: int, open_calls: list[tuple[str, str]]) -> list[dict]:
    messages: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # the user content's parts since the last tool message
    for k, part in enumerate(parts):
        if "functionResponse" in part:
            if pending:
                messages.append(_user_message(pending))
                pending = []
            messages.append(_tool_message(camel(part["functionResponse"]), open_calls,
                                          f"call_{index}_{k}"))
        elif isinstance(part.get("text"), str) and not part.get("thought"):
            pending.append({"type": "text", "text": part["text"]})
        elif "inlineData" in part:
            pending.append(_inline(camel(part["inlineData"])))
        else:
            _refuse_unknown(part, "a user turn")
    if pending or not messages:
        messages.append(_user_message(pending))
    return messages


def _user_message(content: list[dict[str, Any]]) -> dict[str, Any]:
    if len(content) == 1 and content[0]["type"] == "text":
        return {"role": "user", "content": content[0]["text"]}
    return {"role": "user", "content": content}


def _tool_message(response: dict[str, Any], open_calls: list[tuple[str, str]],
                  fallback_id: str) -> dict[str, Any]:
    if response.get("parts"):
        raise Untranslatable("a functionResponse with parts (media) has no Chat Completions form")
    name, own_id = response.get("name", ""), response.get("id")
    match = next((c for c in open_calls if own_id and c[0] == own_id), None) or next(
        (c for c in open_calls if c[1] == name), None)
    if match is not None:
        open_calls.remove(match)
    call_id = match[0] if match is not None else own_id or fallback_id
    return {"role": "tool", "tool_call_id": call_id, "content": _dumps(response.get("response"))}


def _inline(blob: dict[str, Any]) -> dict[str, Any]:
    mime, data = blob.get("mimeType") or "", blob.get("data") or ""
    if mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
    if mime.startswith("text/") or mime == "application/json":
        try:
            return {"type": "text", "text": base64.b64decode(data).decode()}
        except (binascii.Error, ValueError) as e:
            raise Untranslatable(f"inlineData of type {mime} is not base64 text") from e
    raise Untranslatable(f"inlineData of type {mime or 'unknown'} has no Chat Completions form")


def _refuse_unknown(part: dict[str, Any], where: str) -> None:
    """A part that is not text is refused, but for keys that only annotate (signatures)."""
    if isinstance(part.get("text"), str) or not set(part) - _PART_IGNORED:
        return
    kind = next(iter(set(part) - _PART_IGNORED))
    raise Untranslatable(f"a {kind!r} part in {where} has no Chat Completions form")


# --- tools -------------------------------------------------------------------------------


def _tools(data: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    functions = []
    for entry in data.get("tools") or ():
        for key, value in camel(entry).items():
            if key != "functionDeclarations":
                raise Untranslatable(f"the server tool {key!r} cannot run on the engine")
            functions += [_function(camel(f)) for f in value or ()]
    config = camel(camel(data.get("toolConfig") or {}).get("functionCallingConfig") or {})
    allowed = config.get("allowedFunctionNames")
    if allowed:
        functions = [f for f in functions if f["function"]["name"] in allowed]
    mode = str(config.get("mode") or "AUTO").upper()
    if mode == "NONE":
        return functions, "none"
    if mode == "ANY":
        if allowed and len(allowed) == 1:
            return functions, {"type": "function", "function": {"name": allowed[0]}}
        return functions, "required"
    return functions, None  # AUTO, VALIDATED, unspecified: the engine's default, auto


def _function(declaration: dict[str, Any]) -> dict[str, Any]:
    if "parametersJsonSchema" in declaration:
        parameters = declaration["parametersJsonSchema"]
    elif declaration.get("parameters") is not None:
        parameters = json_schema(declaration["parameters"])
    else:
        parameters = {"type": "object", "properties": {}}
    function = {"name": declaration.get("name", ""), "parameters": parameters}
    if declaration.get("description"):
        function["description"] = declaration["description"]
    return {"type": "function", "function": function}


def json_schema(schema: Any) -> Any:
    """Gemini's `Schema` (OpenAPI 3.0 subset, protobuf JSON) as JSON Schema."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in camel(schema).items():
        if key == "type" and isinstance(value, str):
            if value.upper() != "TYPE_UNSPECIFIED":
                out["type"] = value.lower()
        elif key == "properties" and isinstance(value, dict):  # keys are names: kept as sent
            out["properties"] = {name: json_schema(s) for name, s in value.items()}
        elif key in ("items", "not"):
            out[key] = json_schema(value)
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            out[key] = [json_schema(s) for s in value]
        elif key in _SCHEMA_INTS and isinstance(value, str) and value.isdigit():
            out[key] = int(value)
        elif key not in ("nullable", "propertyOrdering"):
            out[key] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


# --- generation config -------------------------------------------------------------------


def _config(config: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(config) - set(_SAMPLING) - _HINTS - _CONFIG_OWN)
    if unknown:
        raise Untranslatable(f"generationConfig.{unknown[0]} has no Chat Completions form")
    if (config.get("candidateCount") or 1) != 1:
        raise Untranslatable("candidateCount above 1 is not bridged")
    if any(str(m).upper() != "TEXT" for m in config.get("responseModalities") or ()):
        raise Untranslatable("only text responses are bridged")
    out = {chat: config[key] for key, chat in _SAMPLING.items() if config.get(key) is not None}
    mime = config.get("responseMimeType") or "text/plain"
    schema = config.get("responseJsonSchema")
    if schema is None and config.get("responseSchema") is not None:
        schema = json_schema(config["responseSchema"])
    if mime == "application/json":
        out["response_format"] = ({"type": "json_object"} if schema is None else {
            "type": "json_schema", "json_schema": {"name": "response", "schema": schema}})
    elif mime != "text/plain" or schema is not None:
        raise Untranslatable(f"responseMimeType {mime} with a schema is not bridged")
    return out


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
