"""Raw requests predicted from their blobs: what raw request frames are compressed against.

A raw request body is the normalized request in its dialect's wire form: the same text, but
`tool_use` where the record says `tool_call`, `input` where it has `arguments_raw`, keys in
the client's order where a blob's are sorted. Compressed against the blobs themselves
(store.delta's plain hint), every block boundary costs zstd a new match. Compressed against
the blobs *rendered* the way the client writes them, a body is a few long matches: on the
150-call session of bench/storage.py, raw requests take ~7 KB instead of 33.6 (keyframes
16.4 to 3.0 KB, deltas 17.2 to 4.0).

A rendering is only a dictionary: it need not be the body, and any bytes decode correctly as
long as the reader renders the very same bytes from the very same blobs. So `render` is
frozen: what it returns for given blobs must never change (tests/test_store_wire.py pins
it), or frames written before no longer decode; a change is a new frame mark beside
store.delta.RENDERED, not an edit. It re-serializes values with orjson; store.delta writes
a checksum into every rendered keyframe, so a rendering that did change (an orjson that
writes a value differently) is refused loudly, never read back as wrong bytes.

Only Anthropic Messages requests are rendered (DIALECTS); the others keep the plain hint.
Any blob renders: a block or a value of a shape it does not know is written as it is.
"""

from __future__ import annotations

from typing import Any

import orjson

DIALECTS = frozenset({"anthropic.messages"})


def render(parts: list[bytes], messages: list[bytes]) -> bytes:
    """A keyframe's rendering (`parts`: the system, tools and parameters blobs) or a delta's
    (no parts: the messages it appended), each message rendered from its blob."""
    body = b",".join(_message(orjson.loads(m)) for m in messages)
    if not parts:
        return body
    system, tools, parameters = parts
    # The parameters blob's own bytes, its braces opened: they are the body's last keys.
    return (b'{"messages":[' + body + b'],"system":' + _list(orjson.loads(system), _block)
            + b',"tools":' + _list(orjson.loads(tools), _tool) + b"," + parameters[1:])


def _list(value: Any, item) -> bytes:
    if not isinstance(value, list):
        return orjson.dumps(value)
    return b"[" + b",".join(item(v) for v in value) + b"]"


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
        raw = block.get("arguments_raw")
        arguments = raw.encode() if isinstance(raw, str) and raw else orjson.dumps(
            block.get("arguments"))
        return (b'{"type":"tool_use","id":' + orjson.dumps(block.get("id")) + b',"name":'
                + orjson.dumps(block.get("name")) + b',"input":' + arguments + b"}")
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
