"""Raw requests predicted from their blobs: what raw request frames are compressed against.

A raw request body is the normalized request in its dialect's wire form: the same text, but
`tool_use` where the record says `tool_call`, `input` where it has `arguments_raw`, keys in
the client's order where a blob's are sorted. Compressed against the blobs themselves
(store.delta's plain hint), every block boundary costs zstd a new match. Compressed against
the blobs *rendered* the way the client writes them, a body is a few long matches: on the
150-call session of bench/storage.py, raw requests take ~7 KB instead of 33.6 (keyframes
16.4 to 3.0 KB, deltas 17.2 to 4.0).

A rendering is only a dictionary: it need not be the body, and any bytes decode correctly as
long as the reader renders the very same bytes from the very same blobs. So each rendering is
frozen: what it returns for given blobs must never change (tests/test_store_wire.py pins
them), or frames written before no longer decode; a change is a new rendering with a new
mark, not an edit. A rendering's mark is the first byte of the frames compressed against it
(store.delta), so the reader knows which to render whatever the exchange's dialect:

- b"W": Anthropic Messages requests, as Claude Code writes them.
- b"G": Gemini requests (the Gemini API's and Code Assist's), as Gemini CLI writes them.
  Here the plain hint is at its worst: a tool result's `response` object is kept in its
  blob as JSON text, every quote and newline of a command's output escaped once more than in
  the body; rendered, it is the body's bytes again (bench/storage.py --gemini).
- b"C": OpenAI Chat Completions requests (Qwen Code, aider, any OpenAI-compatible client):
  `tool_calls` with their `arguments` string, `tool` messages, and a text-only content both
  as a string and as a list of text parts, since clients write either (--qwen).
- b"R": OpenAI Responses requests, as Codex writes its items (--codex-http). The items' ids
  are not in the record, so they are the literals left.

Other dialects keep the plain hint (mark b""). Renderings re-serialize values with orjson;
store.delta writes a checksum into every rendered keyframe, so a rendering that did change
(an orjson that writes a value differently) is refused loudly, never read back as wrong
bytes. Any blob renders: a block or a value of a shape a rendering does not know is written
as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import orjson

MARKS = {"anthropic.messages": b"W", "gemini.generate": b"G", "gemini.code_assist": b"G",
         "openai.chat": b"C", "openai.responses": b"R"}


def mark(dialect: str) -> bytes:
    """The mark of the rendering a dialect's raw requests are compressed against, b"" for
    the plain hint."""
    return MARKS.get(dialect, b"")


def render(mark: bytes, parts: list[bytes], messages: list[bytes]) -> bytes:
    """A keyframe's rendering (`parts`: the system, tools and parameters blobs) or a delta's
    (no parts: the messages it appended), each message rendered from its blob."""
    rendering = _RENDERINGS.get(mark)
    if rendering is None:
        raise ValueError(f"a raw request frame rendered as {mark!r}, which this forge-record "
                         "does not know")
    return rendering(parts, messages)


# --- what the renderings share ------------------------------------------------------


def _list(value: Any, item) -> bytes:
    if not isinstance(value, list):
        return orjson.dumps(value)
    return b"[" + b",".join(item(v) for v in value) + b"]"


def _arguments(block: dict) -> str:
    """A tool call's arguments as the client sent them: their raw JSON text where the record
    kept it, else the parsed value written again."""
    raw = block.get("arguments_raw")
    return raw if isinstance(raw, str) and raw else orjson.dumps(block.get("arguments")).decode()


def _texts(blocks: Any, kind: bytes, strings: bool = True) -> bytes:
    """Text content as OpenAI clients write it: with `strings`, a single text as a string;
    else a list of parts, each text a `{"type": kind, "text": ...}`."""
    if (strings and isinstance(blocks, list) and len(blocks) == 1
            and isinstance(blocks[0], dict) and blocks[0].get("type") == "text"):
        return orjson.dumps(blocks[0].get("text"))
    return _list(blocks, partial(_text_item, kind))


def _text_item(kind: bytes, block: Any) -> bytes:
    if isinstance(block, dict) and block.get("type") == "text":
        return b'{"type":"' + kind + b'","text":' + orjson.dumps(block.get("text")) + b"}"
    return orjson.dumps(block)


# --- b"W": Anthropic Messages, as Claude Code writes them ---------------------------------


def _anthropic(parts: list[bytes], messages: list[bytes]) -> bytes:
    body = b",".join(_message(orjson.loads(m)) for m in messages)
    if not parts:
        return body
    system, tools, parameters = parts
    # The parameters blob's own bytes, its braces opened: they are the body's last keys.
    return (b'{"messages":[' + body + b'],"system":' + _list(orjson.loads(system), _block)
            + b',"tools":' + _list(orjson.loads(tools), _tool) + b"," + parameters[1:])


def _message(message: Any) -> bytes:
    if not isinstance(message, dict):
        return orjson.dumps(message)
    return (b'{"role":' + orjson.dumps(message.get("role")) + b',"content":'
            + _list(message.get("content"), _block) + b"}")


def _tool(tool: Any) -> bytes:
    if not isinstance(tool, dict):
        return orjson.dumps(tool)
    return orjson.dumps({"name": tool.get("name"), "description": tool.get("description"),
                         "input_schema": tool.get("parameters")})


def _block(block: Any) -> bytes:
    """One content block as Claude Code writes it (keys in its order)."""
    if not isinstance(block, dict):
        return orjson.dumps(block)
    kind = block.get("type")
    if kind == "tool_call":
        return (b'{"type":"tool_use","id":' + orjson.dumps(block.get("id")) + b',"name":'
                + orjson.dumps(block.get("name")) + b',"input":' + _arguments(block).encode()
                + b"}")
    if kind == "reasoning":
        return orjson.dumps({"type": "thinking", "thinking": block.get("text", ""),
                             "signature": block.get("signature", "")})
    if kind == "tool_result":
        content = block.get("content")
        text = (isinstance(content, list) and len(content) == 1
                and isinstance(content[0], dict) and content[0].get("type") == "text")
        return (b'{"tool_use_id":' + orjson.dumps(block.get("tool_call_id")) + b',"type":'
                b'"tool_result","content":' + (orjson.dumps(content[0].get("text")) if text
                                                else _list(content, _block))
                + b',"is_error":' + orjson.dumps(bool(block.get("is_error"))) + b"}")
    return orjson.dumps({"type": kind, **{k: v for k, v in block.items() if k != "type"}})


# --- b"G": Gemini, as Gemini CLI writes it --------------------------------------------------

_GEMINI_ROLES = {"assistant": "model", "tool": "function"}


def _gemini(parts: list[bytes], messages: list[bytes]) -> bytes:
    body = b",".join(_content(orjson.loads(m)) for m in messages)
    if not parts:
        return body
    system, tools, parameters = parts
    return (b'{"contents":[' + body + b'],"systemInstruction":{"parts":'
            + _parts(orjson.loads(system)) + b',"role":"user"},"tools":[{"functionDeclarations":'
            + _list(orjson.loads(tools), _declaration) + b"}]," + parameters[1:])


def _content(message: Any) -> bytes:
    if not isinstance(message, dict):
        return orjson.dumps(message)
    role = message.get("role")
    return (b'{"parts":' + _parts(message.get("content")) + b',"role":'
            + orjson.dumps(_GEMINI_ROLES.get(role, role) if isinstance(role, str) else role)
            + b"}")


def _parts(blocks: Any) -> bytes:
    """Blocks as parts. A signature alone (a Reasoning without text) rides on the part after
    it, as the API puts it."""
    if not isinstance(blocks, list):
        return orjson.dumps(blocks)
    out: list[bytes] = []
    signature = None
    for block in blocks:
        if signature is not None:
            out.append(_signed(_part(block), signature))
            signature = None
        elif (isinstance(block, dict) and block.get("type") == "reasoning"
              and not block.get("text") and block.get("signature")):
            signature = block["signature"]
        else:
            out.append(_part(block))
    if signature is not None:
        out.append(_signed(b"{}", signature))
    return b"[" + b",".join(out) + b"]"


def _signed(part: bytes, signature: Any) -> bytes:
    sealed = b'"thoughtSignature":' + orjson.dumps(signature) + b"}"
    return part[:-1] + (b"," if part != b"{}" else b"") + sealed if part[-1:] == b"}" else part


def _part(block: Any) -> bytes:
    if not isinstance(block, dict):
        return orjson.dumps(block)
    kind = block.get("type")
    if kind == "text":
        return b'{"text":' + orjson.dumps(block.get("text")) + b"}"
    if kind == "reasoning":
        thought = b'{"text":' + orjson.dumps(block.get("text")) + b',"thought":true}'
        return _signed(thought, block["signature"]) if block.get("signature") else thought
    if kind == "tool_call":
        return (b'{"functionCall":{' + _id(block.get("id"), block.get("name")) + b'"args":'
                + _arguments(block).encode() + b',"name":' + orjson.dumps(block.get("name"))
                + b"}}")
    if kind == "tool_result":
        # The response object is the first text block's text (decoders.gemini_parts keeps it
        # as JSON text): written as it is, it is the body's bytes again.
        content = block.get("content")
        first = content[0] if isinstance(content, list) and content else None
        response = (b',"response":' + first["text"].encode()
                    if isinstance(first, dict) and isinstance(first.get("text"), str) else b"")
        own = _id(block.get("tool_call_id"), block.get("name"))
        return (b'{"functionResponse":{"name":' + orjson.dumps(block.get("name")) + response
                + (b"," + own[:-1] if own else b"") + b"}}")
    if kind == "other":
        return orjson.dumps(block.get("data"))
    return orjson.dumps(block)


def _id(ident: Any, name: Any) -> bytes:
    """`"id":…,` where the call had an id of its own: the Gemini API sends none, and a call
    without one is named after its function in the record (`name`, `name#2`)."""
    if not isinstance(ident, str) or not isinstance(name, str) or ident == name or (
            ident.startswith(name + "#")):
        return b""
    return b'"id":' + orjson.dumps(ident) + b","


def _declaration(tool: Any) -> bytes:
    if not isinstance(tool, dict):
        return orjson.dumps(tool)
    if tool.get("kind", "function") != "function":  # a built-in tool: googleSearch, ...
        return orjson.dumps({str(tool.get("kind")): tool.get("parameters") or {}})
    declared = {"name": tool.get("name")}
    for key, wire_key in (("description", "description"), ("parameters", "parametersJsonSchema")):
        if tool.get(key) is not None:
            declared[wire_key] = tool[key]
    return orjson.dumps(declared)


# --- b"C": OpenAI Chat Completions, a text-only content both ways ---------------------------


def _chat(parts: list[bytes], messages: list[bytes]) -> bytes:
    """Clients write a text-only content as a string (the OpenAI SDK's examples, LiteLLM) or
    as a list of text parts (Qwen Code), and the record does not say which: the rendering is
    the request both ways, strings first."""
    return _chat_request(parts, messages, True) + _chat_request(parts, messages, False)


def _chat_request(parts: list[bytes], messages: list[bytes], strings: bool) -> bytes:
    body = b",".join(_chat_message(orjson.loads(m), strings) for m in messages)
    if not parts:
        return body
    system, tools, parameters = parts
    blocks = orjson.loads(system)
    lead = (b'{"role":"system","content":' + _texts(blocks, b"text", strings) + b"},"
            if blocks else b"")
    return (b'{"messages":[' + lead + body + b'],"tools":' + _list(orjson.loads(tools), _function)
            + b"," + parameters[1:])


def _chat_message(message: Any, strings: bool) -> bytes:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return orjson.dumps(message)
    role, blocks = message.get("role"), message["content"]
    if role == "tool":  # one ToolResult a message (decoders.openai_chat)
        return b",".join(_tool_message(b, strings) for b in blocks)
    if role != "assistant":
        return (b'{"role":' + orjson.dumps(role) + b',"content":' + _texts(blocks, b"text", strings)
                + b"}")
    kinds = [b.get("type") if isinstance(b, dict) else None for b in blocks]
    said = [b for b, k in zip(blocks, kinds, strict=True) if k not in ("tool_call", "reasoning")]
    out = b'{"role":"assistant","content":' + (_texts(said, b"text", strings) if said else b"null")
    for block, kind in zip(blocks, kinds, strict=True):
        if kind == "reasoning" and block.get("text"):
            out += b',"reasoning_content":' + orjson.dumps(block["text"])
    calls = [_chat_call(b) for b, k in zip(blocks, kinds, strict=True) if k == "tool_call"]
    return out + (b',"tool_calls":[' + b",".join(calls) + b"]" if calls else b"") + b"}"


def _tool_message(block: Any, strings: bool) -> bytes:
    if not isinstance(block, dict) or block.get("type") != "tool_result":
        return orjson.dumps(block)
    return (b'{"role":"tool","tool_call_id":' + orjson.dumps(block.get("tool_call_id"))
            + b',"content":' + _texts(block.get("content"), b"text", strings) + b"}")


def _chat_call(block: dict) -> bytes:
    return (b'{"id":' + orjson.dumps(block.get("id")) + b',"type":"function","function":{"name":'
            + orjson.dumps(block.get("name")) + b',"arguments":' + orjson.dumps(_arguments(block))
            + b"}}")


def _function(tool: Any) -> bytes:
    if not isinstance(tool, dict) or tool.get("kind", "function") != "function":
        return orjson.dumps(tool)
    return orjson.dumps({"type": "function", "function": {
        "name": tool.get("name"), "description": tool.get("description"),
        "parameters": tool.get("parameters")}})


# --- b"R": OpenAI Responses, as Codex writes it -------------------------------------------


def _responses(parts: list[bytes], messages: list[bytes]) -> bytes:
    body = b",".join(_items(orjson.loads(m)) for m in messages)
    if not parts:
        return body
    system, tools, parameters = parts
    blocks = orjson.loads(system)
    lead = b'"instructions":' + _texts(blocks, b"input_text") + b"," if blocks else b""
    return (b"{" + lead + b'"input":[' + body + b'],"tools":'
            + _list(orjson.loads(tools), _responses_tool) + b"," + parameters[1:])


def _items(message: Any) -> bytes:
    """A message as the items it was: one message item, or a run of the model's items (its
    text, calls and reasoning, each an item), or a tool output. The items' ids are not in
    the record: each renders with an empty one, so a body's id is the only literal there."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return orjson.dumps(message)
    role, blocks = message.get("role"), message["content"]
    if role == "assistant":
        return b",".join(_model_item(b) for b in blocks)
    if role == "tool":
        return b",".join(_output_item(b) for b in blocks)
    return (b'{"type":"message","id":"","role":' + orjson.dumps(role) + b',"content":'
            + _texts(blocks, b"input_text", strings=False) + b"}")


def _model_item(block: Any) -> bytes:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text":
        return (b'{"type":"message","status":"completed","id":"","role":"assistant","content":['
                + _text_item(b"output_text", block)[:-1] + b',"annotations":[],"logprobs":[]}]}')
    if kind == "tool_call" and not block.get("server"):
        raw = block.get("arguments_raw")
        if block.get("arguments") is None and isinstance(raw, str) and raw:  # freeform
            return (b'{"type":"custom_tool_call","status":"completed","id":"","call_id":'
                    + orjson.dumps(block.get("id")) + b',"name":' + orjson.dumps(block.get("name"))
                    + b',"input":' + orjson.dumps(raw) + b"}")
        return (b'{"type":"function_call","status":"completed","id":"","name":'
                + orjson.dumps(block.get("name")) + b',"arguments":'
                + orjson.dumps(_arguments(block)) + b',"call_id":' + orjson.dumps(block.get("id"))
                + b"}")
    if kind == "tool_call":  # a tool the API ran: its item's id is the record's
        return (b'{"type":"web_search_call","status":"completed","id":'
                + orjson.dumps(block.get("id")) + b',"action":'
                + orjson.dumps(block.get("arguments")) + b"}")
    if kind == "reasoning":
        text = block.get("text")
        summary = (b'[{"type":"summary_text","text":' + orjson.dumps(text) + b"}]" if text
                   else b"[]")
        return (b'{"type":"reasoning","id":"","summary":' + summary + b',"encrypted_content":'
                + orjson.dumps(block.get("encrypted")) + b"}")
    if kind == "other":
        return orjson.dumps(block.get("data"))
    return orjson.dumps(block)


def _output_item(block: Any) -> bytes:
    if not isinstance(block, dict) or block.get("type") != "tool_result":
        return orjson.dumps(block)
    return (b'{"type":"function_call_output","id":"","call_id":'
            + orjson.dumps(block.get("tool_call_id")) + b',"output":'
            + _texts(block.get("content"), b"input_text") + b"}")


def _responses_tool(tool: Any) -> bytes:
    if not isinstance(tool, dict):
        return orjson.dumps(tool)
    kind, name, parameters = tool.get("kind", "function"), tool.get("name"), tool.get("parameters")
    if kind == "function":
        return orjson.dumps({"type": "function", "name": name, "description":
                             tool.get("description"), "strict": False, "parameters": parameters})
    if kind == "custom":
        return orjson.dumps({"type": "custom", "name": name, "description":
                             tool.get("description"), "format": parameters})
    named = {"name": name} if name != kind else {}
    return orjson.dumps({"type": kind, **named,
                         **(parameters if isinstance(parameters, dict) else {})})


_RENDERINGS: dict[bytes, Callable[[list[bytes], list[bytes]], bytes]] = {
    b"W": _anthropic, b"G": _gemini, b"C": _chat, b"R": _responses}
