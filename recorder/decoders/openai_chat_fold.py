"""The Chat Completions chunk fold: parsed `chat.completion.chunk` dicts into one
ChatCompletion-shaped dict, which `openai_chat.completion_response` turns into a Response
exactly as it does a JSON body.

Pure and incremental: `apply(chunk)` per SSE payload, `snapshot()` at the end. Strings grow
as lists of fragments joined once (linear time for long answers). Per choice: `role` is
replaced; `content`, `refusal`, `reasoning_content` and `reasoning` are concatenated;
`tool_calls` entries are merged by `index` (the first non-empty `id`, `type` and name are
kept, `arguments`/`input` are concatenated); legacy `function_call` likewise; logprob lists
are extended; an engine's per-chunk `token_ids` are extended and its choice-level
`prompt_token_ids` and `stop_reason` kept (vLLM, SGLang); any other delta field is merged
generically (strings joined, lists extended, dicts merged, other values replaced).
Top-level fields keep their last non-null value; `usage` too. `obfuscation` padding is
dropped wherever it appears. Raises one of the shape errors (TypeError, KeyError, ...) on a
chunk it cannot apply; the caller keeps it aside.
"""

from __future__ import annotations

from typing import Any

_GROWING = ("content", "refusal", "reasoning_content", "reasoning")
_SKIP_TOP = {"choices", "usage", "obfuscation"}
_ENGINE_CHOICE_FIELDS = ("prompt_token_ids", "stop_reason")


class _ToolCall:
    def __init__(self) -> None:
        self.id: str | None = None
        self.type: str | None = None
        self.name: str | None = None
        self.pieces: list[str] = []  # arguments (function) or input (custom)

    def add(self, raw: dict[str, Any]) -> None:
        self.id = self.id or raw.get("id")
        self.type = self.type or raw.get("type")
        body = raw.get("custom") if self.type == "custom" else raw.get("function")
        if isinstance(body, dict):
            self.name = self.name or body.get("name")
            piece = body.get("input" if self.type == "custom" else "arguments")
            if piece is not None:
                if not isinstance(piece, str):
                    raise TypeError("tool call fragment is not a string")
                self.pieces.append(piece)

    def value(self) -> dict[str, Any]:
        joined = "".join(self.pieces)
        if self.type == "custom":
            return {"id": self.id, "type": "custom", "custom": {"name": self.name,
                                                                 "input": joined}}
        return {"id": self.id, "type": self.type or "function",
                "function": {"name": self.name, "arguments": joined}}


class _Choice:
    def __init__(self, index: int) -> None:
        self.index = index
        self.role: str | None = None
        self.strings: dict[str, list[str]] = {}
        self.tool_calls: dict[int, _ToolCall] = {}
        self.function_call: _ToolCall | None = None
        self.other: dict[str, Any] = {}
        self.finish_reason: str | None = None
        self.logprobs: dict[str, list[Any]] = {}
        # An engine's fields beside the delta: its sampled ids arrive a chunk's worth at a
        # time, also on chunks whose delta is empty while a tool-call parser buffers.
        self.token_ids: list[int] = []
        self.engine: dict[str, Any] = {}

    def add(self, choice: dict[str, Any]) -> None:
        for key, value in (choice.get("delta") or {}).items():
            self._add_delta(key, value)
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
        for key, entries in (choice.get("logprobs") or {}).items():
            if entries:
                self.logprobs.setdefault(key, []).extend(entries)
        if ids := choice.get("token_ids"):
            self.token_ids.extend(ids)
        for key in _ENGINE_CHOICE_FIELDS:
            if choice.get(key) is not None:
                self.engine[key] = choice[key]

    def _add_delta(self, key: str, value: Any) -> None:
        if value is None or key == "obfuscation":
            return
        if key == "role":
            self.role = value
        elif key in _GROWING and isinstance(value, str):
            self.strings.setdefault(key, []).append(value)
        elif key == "tool_calls":
            for raw in value:
                self.tool_calls.setdefault(raw["index"], _ToolCall()).add(raw)
        elif key == "function_call":
            self.function_call = self.function_call or _ToolCall()
            self.function_call.add({"function": value})
        else:
            self.other[key] = merge(self.other.get(key), value)

    def value(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": self.role or "assistant", **self.other}
        for key, pieces in self.strings.items():
            message[key] = "".join(pieces)
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i].value() for i in sorted(self.tool_calls)]
        if self.function_call is not None:
            message["function_call"] = self.function_call.value()["function"]
        out: dict[str, Any] = {"index": self.index, "message": message,
                               "finish_reason": self.finish_reason}
        if self.logprobs:
            out["logprobs"] = self.logprobs
        if self.token_ids:
            out["token_ids"] = self.token_ids
        return {**out, **self.engine}


def merge(old: Any, new: Any) -> Any:
    """Generic delta merge for fields the fold has no rule for."""
    if isinstance(old, str) and isinstance(new, str):
        return old + new
    if isinstance(old, list) and isinstance(new, list):
        return old + new
    if isinstance(old, dict) and isinstance(new, dict):
        merged = dict(old)
        for key, value in new.items():
            merged[key] = merge(merged.get(key), value)
        return merged
    return new


class ChatFold:
    def __init__(self) -> None:
        self._top: dict[str, Any] = {}
        self._usage: dict[str, Any] | None = None
        self._choices: dict[int, _Choice] = {}

    def apply(self, chunk: dict[str, Any]) -> None:
        choices = chunk.get("choices") or ()
        for key, value in chunk.items():
            if key not in _SKIP_TOP and value is not None:
                self._top[key] = value
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        for choice in choices:
            index = choice.get("index") or 0
            if not isinstance(index, int):
                raise TypeError("choice index is not an integer")
            self._choices.setdefault(index, _Choice(index)).add(choice)

    def snapshot(self) -> dict[str, Any]:
        return {**self._top, "choices": [self._choices[i].value() for i in
                                         sorted(self._choices)], "usage": self._usage}
