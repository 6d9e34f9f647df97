"""Gemini `Part` objects as record blocks, shared by requests and responses.

`PartFold` folds a sequence of parts (one `Content`, or every chunk of a stream) into blocks:

- `text` parts become `Text`, `thought: true` parts `Reasoning`. In a response, consecutive
  parts of the same kind are joined, so a stream cut into many chunks folds to the same blocks
  as one body; in a request each part stays a block of its own (Gemini CLI sends its session
  context and the prompt as two text parts, and the boundary means something).
- `thoughtSignature` seals the thinking before it: it becomes the `signature` of the open
  `Reasoning`, or of an empty `Reasoning(signature=...)` placed before the part it rides on
  (Gemini puts it on the first text or functionCall part after the hidden thinking).
- `functionCall` becomes `ToolCall`. The Gemini API sends no call ids, so a call without one
  gets its name as id (`name`, then `name#2`, `name#3` for later calls of the same name in
  the fold); a `functionResponse` without an id is named the same way, so a result pairs with
  its call. Vertex streams call arguments as `partialArgs` (`willContinue` until the last
  piece): they are applied by JSON path, strings joined.
- `functionResponse` becomes `ToolResult` (`is_error` when its response has an `error` key),
  `inlineData`/`fileData` become `Media` named by sha256, anything else `Other`, verbatim.

Field names: the API answers in lowerCamelCase, but like any protobuf JSON endpoint it also
reads snake_case, and clients send it (google-genai writes `include_thoughts` and
`parameters_json_schema`). `camel()` puts the structural keys of one object in the API's
spelling; values the model or a tool wrote (call args, tool output) are never touched.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections import Counter
from typing import Any

import orjson

from forge_record.records import Block, Media, Other, Reasoning, Text, ToolCall, ToolResult

_PATH_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")
_SNAKE_WORD = re.compile(r"_([a-z])")


def camel_key(key: str) -> str:
    return _SNAKE_WORD.sub(lambda m: m.group(1).upper(), key) if "_" in key else key


def camel(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with its own keys in lowerCamelCase (`function_call` -> `functionCall`)."""
    if not any("_" in k for k in obj):
        return obj
    return {camel_key(k): v for k, v in obj.items()}


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def media(part: dict[str, Any]) -> Media:
    part = camel(part)
    if "inlineData" in part:
        blob = camel(part["inlineData"])
        payload = _b64(blob.get("data", ""))
        return Media(type=_media_kind(blob.get("mimeType")), media_type=blob.get("mimeType"),
                     sha256=hashlib.sha256(payload).hexdigest(), size=len(payload))
    ref = camel(part["fileData"])
    uri = ref.get("fileUri")
    return Media(type=_media_kind(ref.get("mimeType")), media_type=ref.get("mimeType"), url=uri,
                 sha256=hashlib.sha256(uri.encode()).hexdigest() if uri else None)


def _media_kind(mime: str | None) -> str:
    return "image" if (mime or "").startswith("image/") else "document"


def _b64(data: str) -> bytes:
    try:
        return base64.b64decode(data)
    except (binascii.Error, ValueError):
        return data.encode()  # still names the content, if not the decoded bytes


class PartFold:
    def __init__(self, merge_text: bool = True) -> None:
        self._merge = merge_text
        self._blocks: list[Block] = []
        self._growing: Text | Reasoning | None = None  # the last block, still taking text
        self._fragments: list[str] = []  # its text so far, joined once when it closes
        self._streaming_call: ToolCall | None = None  # a Vertex call with partialArgs
        self._calls: Counter[str] = Counter()
        self._results: Counter[str] = Counter()

    def add(self, raw: dict[str, Any]) -> None:
        part = camel(raw)
        signature = part.get("thoughtSignature")
        if "text" in part:
            text = part["text"]
            if not isinstance(text, str):
                raise TypeError("text part is not a string")
            if part.get("thought"):
                self._add_reasoning(text, signature)
                return
            if signature:
                self._sign(signature)
            if text:
                self._add_text(text)
        elif "functionCall" in part:
            if signature:
                self._sign(signature)
            self._add_call(camel(part["functionCall"]))
        elif "functionResponse" in part:
            self._append(self._result(camel(part["functionResponse"])))
        elif "inlineData" in part or "fileData" in part:
            self._append(media(part))
        else:
            self._append(Other(data=raw))

    def blocks(self) -> list[Block]:
        self._close()
        if self._streaming_call is not None:  # the stream stopped inside a streamed call
            self._seal_call(self._streaming_call)
            self._streaming_call = None
        return self._blocks

    # --- text and thinking ---------------------------------------------------------------

    def _add_text(self, text: str) -> None:
        if not (self._merge and isinstance(self._growing, Text)):
            self._append(Text(text=""), grows=True)
        self._fragments.append(text)

    def _add_reasoning(self, text: str, signature: str | None) -> None:
        if not (self._merge and isinstance(self._growing, Reasoning)):
            self._append(Reasoning(), grows=True)
        self._fragments.append(text)
        if signature:
            self._growing.signature = signature  # type: ignore[union-attr]
            self._close()  # a signature ends its thinking; more thought is a new block

    def _sign(self, signature: str) -> None:
        if isinstance(self._growing, Reasoning):
            self._growing.signature = signature
            self._close()
        else:
            self._append(Reasoning(signature=signature))

    def _append(self, block: Block, grows: bool = False) -> None:
        self._close()
        self._blocks.append(block)
        if grows:
            self._growing = block  # type: ignore[assignment]

    def _close(self) -> None:
        if self._growing is not None:
            self._growing.text += "".join(self._fragments)
            self._growing, self._fragments = None, []

    # --- tools ---------------------------------------------------------------------------

    def _add_call(self, call: dict[str, Any]) -> None:
        streaming = self._streaming_call
        if "partialArgs" not in call and "willContinue" not in call and streaming is None:
            name = call.get("name", "")
            args = call.get("args", {})
            self._append(ToolCall(id=call.get("id") or self._name(self._calls, name), name=name,
                                  arguments=args, arguments_raw=dumps(args)))
            return
        if streaming is None:  # the first piece of a streamed call names it
            name = call.get("name", "")
            streaming = ToolCall(id=call.get("id") or self._name(self._calls, name), name=name,
                                 arguments=dict(call.get("args") or {}))
            self._append(streaming)
            self._streaming_call = streaming
        for piece in call.get("partialArgs") or ():
            _apply_partial(streaming.arguments, camel(piece))
        if not call.get("willContinue"):
            self._seal_call(streaming)
            self._streaming_call = None

    @staticmethod
    def _seal_call(call: ToolCall) -> None:
        call.arguments_raw = dumps(call.arguments)

    def _result(self, response: dict[str, Any]) -> ToolResult:
        name = response.get("name", "")
        output = response.get("response")
        content: list[Block] = [Text(text=dumps(output))] if output is not None else []
        content += [media(p) for p in response.get("parts") or () if isinstance(p, dict)
                    and ("inlineData" in p or "fileData" in p)]
        return ToolResult(tool_call_id=response.get("id") or self._name(self._results, name),
                          name=name or None, content=content,
                          is_error=isinstance(output, dict) and "error" in output)

    @staticmethod
    def _name(seen: Counter[str], name: str) -> str:
        seen[name] += 1
        return name if seen[name] == 1 else f"{name}#{seen[name]}"


def _apply_partial(args: dict[str, Any], piece: dict[str, Any]) -> None:
    """One `partialArgs` entry: a JSON path (`$.a.b[0]`) and a value; strings continue."""
    steps = [m.group(1) if m.group(1) is not None else int(m.group(2))
             for m in _PATH_STEP.finditer(piece.get("jsonPath", ""))]
    if not steps:
        raise ValueError(f"bad jsonPath {piece.get('jsonPath')!r}")
    target: Any = args
    for step, following in zip(steps, steps[1:], strict=False):
        empty: Any = [] if isinstance(following, int) else {}
        if isinstance(step, int):
            _pad(target, step)
            if target[step] is None:
                target[step] = empty
        else:
            target.setdefault(step, empty)
        target = target[step]
    last = steps[-1]
    if isinstance(last, int):
        _pad(target, last)
    if "stringValue" in piece:
        before = target[last] if isinstance(last, int) else target.get(last)
        target[last] = (before if isinstance(before, str) else "") + piece["stringValue"]
    else:  # nullValue, or a value that replaces
        target[last] = next((piece[k] for k in ("numberValue", "boolValue") if k in piece), None)


def _pad(items: list[Any], index: int) -> None:
    items.extend([None] * (index + 1 - len(items)))
