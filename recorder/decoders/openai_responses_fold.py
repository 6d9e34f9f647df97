"""The Responses API fold: stream events (already parsed, one dict each) into a Response.

`ResponsesFold` is a pure fold: `apply(event)`, `complete`, `finish() -> Response`. It serves
SSE `data:` payloads (`openai_responses`) and WebSocket frames alike. The terminal event's
`response` (`response.completed`, `.failed`, `.incomplete`) is authoritative for the whole
turn; when its `output` is missing or empty, each output item is taken from its
`response.output_item.done`, and failing that from `output_item.added` grown by its deltas
(an aborted stream). `complete` is True once a terminal event arrived; an `error` event alone
does not complete a response.

Mapping (docs/records.md): output items -> blocks as `openai_items` says; item metadata
(type, id, call_id, status, role, phase) -> `extras["output_items"]`, in output order;
`stop_reason` = `incomplete_details.reason` when set (`max_output_tokens`,
`content_filter`), else the status (`completed`, `failed`, `cancelled`), None while in
progress; `error` = the failed response's `error`, or an `error` event (its nested `error`
object when wrapped, as Codex's WebSocket frames are); usage `input_tokens` excludes
`input_tokens_details.cached_tokens`. The response object's echo of the request
(instructions, tools, reasoning, text, ...) is dropped: the request record holds it. Other
non-null fields (status, created_at, incomplete_details, service_tier, ...) go to extras;
output_text logprobs to `extras["logprobs"]`.

Tolerance: the fold never raises. An event it cannot apply is kept verbatim in
`extras["undecoded_events"]`; an unknown event type in `extras["unknown_events"]`.
"""

from __future__ import annotations

import copy
from typing import Any

from forge_record.decoders.base import SHAPE_ERRORS
from forge_record.decoders.openai_items import item_blocks, output_metadata, token_usage
from forge_record.records import Response, Usage

__all__ = ["ResponsesFold", "response_record", "responses_usage"]

_OWN_FIELDS = {"id", "model", "output", "usage", "error", "output_text"}
# Fields a response object repeats from its request; the request record already has them.
_ECHO_FIELDS = {"object", "instructions", "tools", "tool_choice", "parallel_tool_calls",
                "temperature", "top_p", "top_logprobs", "max_output_tokens", "max_tool_calls",
                "reasoning", "text", "truncation", "metadata", "store", "user", "include",
                "previous_response_id", "prompt", "prompt_cache_key", "prompt_cache_retention",
                "safety_identifier", "background", "conversation"}
_STOP_STATUSES = {"completed", "failed", "cancelled", "incomplete"}


# --- a response object as a record -------------------------------------------------------


def responses_usage(raw: Any) -> Usage:
    return token_usage(raw, "input_tokens", "output_tokens")


def _stop_reason(obj: dict[str, Any]) -> str | None:
    details = obj.get("incomplete_details")
    if isinstance(details, dict) and details.get("reason"):
        return details["reason"]
    status = obj.get("status")
    return status if status in _STOP_STATUSES else None


def _logprobs(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for i, item in enumerate(output):
        for j, part in enumerate(item.get("content") or () if item.get("type") == "message"
                                 else ()):
            if isinstance(part, dict) and part.get("logprobs"):
                found.append({"output_index": i, "content_index": j,
                              "logprobs": part["logprobs"]})
    return found


def response_record(obj: dict[str, Any], output: list[dict[str, Any]]) -> Response:
    """A response object (a JSON body, or a stream's final snapshot) with these output
    items, as a Response."""
    extras = {k: v for k, v in obj.items()
              if k not in _OWN_FIELDS and k not in _ECHO_FIELDS and v is not None}
    if output:
        extras["output_items"] = [output_metadata(item) for item in output]
    if logprobs := _logprobs(output):
        extras["logprobs"] = logprobs
    return Response(id=obj.get("id"), model=obj.get("model"),
                    content=[b for item in output for b in item_blocks(item)],
                    stop_reason=_stop_reason(obj), usage=responses_usage(obj.get("usage")),
                    error=obj.get("error") or None, extras=extras)


# --- the stream fold ---------------------------------------------------------------------

# Event family -> (list field or None, its index key, leaf field, item type, new part).
# `<family>.delta` appends `delta` to the leaf; `<family>.done` sets it whole.
_GROWING = {
    "response.output_text": ("content", "content_index", "text", "message",
                             {"type": "output_text", "annotations": []}),
    "response.refusal": ("content", "content_index", "refusal", "message", {"type": "refusal"}),
    "response.function_call_arguments": (None, None, "arguments", "function_call", None),
    "response.custom_tool_call_input": (None, None, "input", "custom_tool_call", None),
    "response.reasoning_summary_text": ("summary", "summary_index", "text", "reasoning",
                                        {"type": "summary_text"}),
    "response.reasoning_text": ("content", "content_index", "text", "reasoning",
                                {"type": "reasoning_text"}),
    "response.code_interpreter_call_code": (None, None, "code", "code_interpreter_call", None),
    "response.mcp_call_arguments": (None, None, "arguments", "mcp_call", None),
}
_PARTS = {"response.content_part": ("content", "content_index"),
          "response.reasoning_summary_part": ("summary", "summary_index")}
# Progress of server-run tools: the item's `.done` says everything they say.
_PROGRESS_PREFIXES = ("response.web_search_call.", "response.file_search_call.",
                      "response.code_interpreter_call.", "response.image_generation_call.",
                      "response.mcp_call.", "response.mcp_list_tools.", "response.audio.",
                      "response.shell_call_")
_LIFECYCLE = {"response.created", "response.queued", "response.in_progress"}
_TERMINAL = {"response.completed", "response.failed", "response.incomplete"}


class ResponsesFold:
    """Responses stream events, one parsed dict at a time, folded into a Response.
    Text, arguments and summaries grow as lists of fragments joined once, so a long answer
    costs linear time."""

    def __init__(self) -> None:
        self._response: dict[str, Any] = {}  # the latest snapshot, without its output
        self._final_output: list[Any] | None = None  # the terminal event's output
        self._items: dict[int, dict[str, Any]] = {}  # output index -> item as added
        self._done: dict[int, dict[str, Any]] = {}  # output index -> item from .done
        self._fragments: dict[tuple, list[str]] = {}  # (index, field[, i, leaf]) -> deltas
        self._error: dict[str, Any] | None = None
        self._extras: dict[str, Any] = {}
        self._terminal: str | None = None

    @property
    def complete(self) -> bool:
        """A terminal event (completed, failed or incomplete) arrived."""
        return self._terminal is not None

    def apply(self, event: Any) -> None:
        """Fold one event. Anything that is not an applicable event dict is kept aside."""
        try:
            self._apply(event)
        except SHAPE_ERRORS:
            self._keep("undecoded_events", event)

    def finish(self) -> Response:
        output = self._final_output
        try:
            if not output:  # missing or empty: rebuild the items from the stream
                output = [self._done[i] if i in self._done else self._joined(i)
                          for i in sorted(self._items.keys() | self._done.keys())]
            response = response_record(self._response, output)
        except SHAPE_ERRORS:  # an item of the wrong shape: keep the items verbatim
            response = Response(id=_str(self._response.get("id")),
                                model=_str(self._response.get("model")))
            self._keep("undecoded_events", {"response": self._response, "output": output})
        response.error = self._error or response.error
        response.extras.update(self._extras)
        return response

    def _keep(self, key: str, item: Any) -> None:
        self._extras.setdefault(key, []).append(item)

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        family, _, step = kind.rpartition(".")
        if kind in _LIFECYCLE or kind in _TERMINAL:
            self._on_response(kind, event["response"])
        elif kind == "response.output_item.added":
            self._items[_index(event)] = copy.deepcopy(_object(event["item"]))
        elif kind == "response.output_item.done":
            self._done[_index(event)] = _object(event["item"])
        elif family in _GROWING and step in ("delta", "done"):
            self._on_growing(family, step, event)
        elif family in _PARTS and step in ("added", "done"):
            self._on_part(family, event)
        elif kind == "response.output_text.annotation.added":
            self._on_annotation(event)
        elif kind == "error":
            nested = event.get("error")
            self._error = nested if isinstance(nested, dict) else {
                k: v for k, v in event.items() if k != "sequence_number"}
        elif not kind.startswith(_PROGRESS_PREFIXES):
            self._keep("unknown_events", event)

    def _on_response(self, kind: str, response: dict[str, Any]) -> None:
        snapshot = {k: v for k, v in _object(response).items() if k != "output"}
        if kind in _TERMINAL:
            output = response.get("output")
            if output is not None and not isinstance(output, list):
                raise TypeError("output is not a list")
            # the terminal response is the whole truth; nothing from earlier snapshots stays
            self._response, self._terminal = snapshot, kind
            self._final_output = output
        else:
            self._response.update(snapshot)

    def _item(self, event: dict[str, Any], item_type: str) -> dict[str, Any]:
        index = _index(event)
        if index not in self._items:  # a delta with no output_item.added before it
            self._items[index] = {"type": item_type, "id": event.get("item_id")}
        return self._items[index]

    def _on_growing(self, family: str, step: str, event: dict[str, Any]) -> None:
        list_field, index_key, leaf, item_type, new_part = _GROWING[family]
        item = self._item(event, item_type)
        index = event["output_index"]
        key: tuple = (index, leaf)
        if list_field is not None:
            sub = event[index_key]
            _slot(item, list_field, sub, new_part)
            key = (index, list_field, sub, leaf)
        if step == "done":
            self._fragments.pop(key, None)
            _set(item, key[1:], event[leaf])
        else:
            fragment = event["delta"]
            if not isinstance(fragment, str):
                raise TypeError("delta is not a string")
            self._fragments.setdefault(key, []).append(fragment)

    def _on_part(self, family: str, event: dict[str, Any]) -> None:
        list_field, index_key = _PARTS[family]
        item = self._item(event, "message" if list_field == "content" else "reasoning")
        index, sub = event["output_index"], event[index_key]
        _slot(item, list_field, sub, None)
        item[list_field][sub] = copy.deepcopy(event["part"])
        for key in [k for k in self._fragments if k[:3] == (index, list_field, sub)]:
            del self._fragments[key]  # the part as sent replaces its deltas so far

    def _on_annotation(self, event: dict[str, Any]) -> None:
        item = self._item(event, "message")
        _slot(item, "content", event["content_index"], _GROWING["response.output_text"][4])
        part = item["content"][event["content_index"]]
        part.setdefault("annotations", []).append(event["annotation"])

    def _joined(self, index: int) -> dict[str, Any]:
        """An unfinished item: as added, with its deltas joined in."""
        item = self._items[index]
        for key in [k for k in self._fragments if k[0] == index]:
            start = _get(item, key[1:])
            _set(item, key[1:], (start if isinstance(start, str) else "")
                 + "".join(self._fragments.pop(key)))
        return item


def _index(event: dict[str, Any]) -> int:
    index = event["output_index"]
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise TypeError(f"bad output_index {index!r}")
    return index


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("not an object")
    return value


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _slot(item: dict[str, Any], list_field: str, sub: int, new_part: dict | None) -> None:
    """Make item[list_field][sub] exist (parts may be announced late, or never)."""
    if not isinstance(sub, int) or sub < 0:
        raise IndexError(f"bad index {sub!r}")
    parts = item.setdefault(list_field, [])
    while len(parts) <= sub:
        parts.append(dict(new_part or {}))


def _parent(item: dict[str, Any], path: tuple) -> dict[str, Any]:
    target: Any = item
    for step in path[:-1]:
        target = target[step]
    if not isinstance(target, dict):
        raise TypeError(f"cannot hold {path[-1]!r}")
    return target


def _get(item: dict[str, Any], path: tuple) -> Any:
    return _parent(item, path).get(path[-1])


def _set(item: dict[str, Any], path: tuple, value: Any) -> None:
    _parent(item, path)[path[-1]] = value
