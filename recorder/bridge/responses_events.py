"""An engine's Chat Completions chunks as Responses stream events: the answer half of the
Responses bridge (forge_record.bridge.responses). A pure incremental fold: `chunk(c)` for
each parsed chat chunk, `end()` once the engine's stream is over.

Events come in the order the API sends them: `response.created` and `response.in_progress`
(with the first chunk), then per output item `output_item.added`, its deltas, its closing
events and `output_item.done`, then `response.completed` holding the whole output and the
usage (`response.incomplete` when the engine stopped at its token limit, `response.failed`
when its stream ended without a finish reason). Each event has its `sequence_number`.

Items: the engine's `reasoning_content` (or `reasoning`) -> a `reasoning` item whose summary
is that text; `content` -> a `message` item with one `output_text` part; each tool call -> a
`function_call` item (call id kept from the engine, arguments streamed as they come), or, for
a freeform tool, a `custom_tool_call` whose `input` is the call's `input` argument: its events
come at the end, since the input is known only once the arguments' JSON is whole. A text or
reasoning item closes when another item starts; calls close at the end (vLLM sends a call's
fragments in a row; a server that interleaves parallel calls gets them interleaved).
Ids are ours: `resp_`, `msg_`, `rs_`, `fc_`, `ctc_`, then random hex.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from forge_record.bridge.responses_request import ToolNames

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


class _Item:
    """One output item being built: its index, its id, and its text so far."""

    def __init__(self, index: int, kind: str, prefix: str) -> None:
        self.index = index
        self.kind = kind
        self.id = new_id(prefix)
        self.parts: list[str] = []
        self.name = ""
        self.call_id = ""

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def ids(self) -> dict[str, Any]:
        return {"item_id": self.id, "output_index": self.index}


class ResponseEvents:
    def __init__(self, response: dict[str, Any], names: ToolNames) -> None:
        """`response`: the response object as created (id, echo of the request, ...)."""
        self.response = dict(response, status="in_progress", output=[], usage=None)
        self.names = names
        self._finished: dict[int, dict[str, Any]] = {}  # output index -> finished item
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.message: dict[str, Any] | None = None  # the answer as a chat message, at the end
        self._seq = 0
        self._started = False
        self._open: _Item | None = None  # the text or reasoning item being written
        self._calls: dict[int, _Item] = {}  # chat tool-call index -> its item
        self._items = 0  # output items opened so far

    @property
    def started(self) -> bool:
        return self._started

    @property
    def output(self) -> list[dict[str, Any]]:
        """The finished items, in output order."""
        return [self._finished[i] for i in sorted(self._finished)]

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        return [self.event("response.created", response=self._snapshot()),
                self.event("response.in_progress", response=self._snapshot())]

    def chunk(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if chunk.get("model") and not self._started:  # the model that answers, from the start
            self.response["model"] = chunk["model"]
        out = self.start()
        if isinstance(chunk.get("usage"), dict):
            self.usage = usage(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # the agent asked for one answer
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                out += self._grow("reasoning", reasoning)
            if delta.get("content"):
                out += self._grow("message", delta["content"])
            for call in delta.get("tool_calls") or ():
                out += self._call(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return out

    def end(self) -> list[dict[str, Any]]:
        """The closing events, the last one terminal; `self.response` is then the whole
        response object."""
        out = self.start() + self._close()
        for index in sorted(self._calls):
            out += self._close_call(self._calls[index])
        self.message = self._chat_message()
        status, terminal = "completed", "response.completed"
        if self.finish_reason in _INCOMPLETE:
            status, terminal = "incomplete", "response.incomplete"
            self.response["incomplete_details"] = {"reason": _INCOMPLETE[self.finish_reason]}
        elif self.finish_reason is None:
            status, terminal = "failed", "response.failed"
            self.response["error"] = {"code": "server_error",
                                      "message": "the engine's stream ended unfinished"}
        self.response.update(status=status, output=self.output, usage=self.usage)
        return [*out, self.event(terminal, response=self.response)]

    def _snapshot(self) -> dict[str, Any]:
        return dict(self.response, output=[])

    # --- text and reasoning ---------------------------------------------------------------

    def _grow(self, kind: str, text: str) -> list[dict[str, Any]]:
        out = []
        item = self._open
        if item is None or item.kind != kind:
            out += self._close()
            item = self._open = self._new(kind, "msg" if kind == "message" else "rs")
            out += self._opened(item)
        item.parts.append(text)
        if kind == "message":
            out.append(self.event("response.output_text.delta", **item.ids(), content_index=0,
                                  delta=text, logprobs=[]))
        else:
            out.append(self.event("response.reasoning_summary_text.delta", **item.ids(),
                                  summary_index=0, delta=text))
        return out

    def _opened(self, item: _Item) -> list[dict[str, Any]]:
        if item.kind == "message":
            return [self.event("response.output_item.added", output_index=item.index,
                               item={"id": item.id, "type": "message", "status": "in_progress",
                                     "content": [], "role": "assistant"}),
                    self.event("response.content_part.added", **item.ids(), content_index=0,
                               part=_text_part(""))]
        return [self.event("response.output_item.added", output_index=item.index,
                           item={"id": item.id, "type": "reasoning", "summary": []}),
                self.event("response.reasoning_summary_part.added", **item.ids(),
                           summary_index=0, part={"type": "summary_text", "text": ""})]

    def _close(self) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        text = item.text
        if item.kind == "message":
            done = {"id": item.id, "type": "message", "status": "completed",
                    "content": [_text_part(text)], "role": "assistant"}
            events = [self.event("response.output_text.done", **item.ids(), content_index=0,
                                 text=text, logprobs=[]),
                      self.event("response.content_part.done", **item.ids(), content_index=0,
                                 part=_text_part(text))]
        else:
            summary = {"type": "summary_text", "text": text}
            done = {"id": item.id, "type": "reasoning", "summary": [summary]}
            events = [self.event("response.reasoning_summary_text.done", **item.ids(),
                                 summary_index=0, text=text),
                      self.event("response.reasoning_summary_part.done", **item.ids(),
                                 summary_index=0, part=summary)]
        return [*events, self._done(item, done)]

    # --- tool calls -----------------------------------------------------------------------

    def _call(self, fragment: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        index = fragment.get("index", len(self._calls))
        function = fragment.get("function") or {}
        item = self._calls.get(index)
        if item is None:
            out += self._close()
            name = function.get("name") or ""
            custom = name in self.names.custom
            item = self._new("custom_tool_call" if custom else "function_call",
                             "ctc" if custom else "fc")
            item.name, item.call_id = name, fragment.get("id") or new_id("call")
            self._calls[index] = item
            if not custom:
                out.append(self.event("response.output_item.added", output_index=item.index,
                                      item=self._function_item(item, "", "in_progress")))
        arguments = function.get("arguments")
        if arguments:
            item.parts.append(arguments)
            if item.kind == "function_call":
                out.append(self.event("response.function_call_arguments.delta", **item.ids(),
                                      delta=arguments))
        return out

    def _close_call(self, item: _Item) -> list[dict[str, Any]]:
        arguments = item.text
        if item.kind == "function_call":
            done = self._function_item(item, arguments, "completed")
            return [self.event("response.function_call_arguments.done", **item.ids(),
                               name=done["name"], arguments=arguments),
                    self._done(item, done)]
        value = freeform_input(arguments)
        done = {"id": item.id, "type": "custom_tool_call", "status": "completed",
                "call_id": item.call_id, "name": item.name, "input": value}
        return [self.event("response.output_item.added", output_index=item.index,
                           item=dict(done, status="in_progress", input="")),
                self.event("response.custom_tool_call_input.delta", **item.ids(), delta=value),
                self.event("response.custom_tool_call_input.done", **item.ids(), input=value),
                self._done(item, done)]

    def _function_item(self, item: _Item, arguments: str, status: str) -> dict[str, Any]:
        namespace, name = self.names.namespaced.get(item.name, (None, item.name))
        found = {"id": item.id, "type": "function_call", "status": status,
                 "arguments": arguments, "call_id": item.call_id, "name": name}
        if namespace is not None:
            found["namespace"] = namespace
        return found

    # --- items ----------------------------------------------------------------------------

    def _new(self, kind: str, prefix: str) -> _Item:
        self._items += 1
        return _Item(self._items - 1, kind, prefix)

    def _done(self, item: _Item, done: dict[str, Any]) -> dict[str, Any]:
        self._finished[item.index] = done
        return self.event("response.output_item.done", output_index=item.index, item=done)

    def _chat_message(self) -> dict[str, Any]:
        """The answer as the assistant message a later request's context holds, the way
        responses_request writes one from these items (reasoning left out)."""
        text = "".join(i["content"][0]["text"] for i in self.output if i["type"] == "message")
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        calls = [{"id": c.call_id, "type": "function",
                  "function": {"name": c.name, "arguments": c.text}}
                 for _, c in sorted(self._calls.items())]
        if calls:
            message["tool_calls"] = calls
        return message


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def freeform_input(arguments: str) -> str:
    """A freeform tool's input from the function arguments the engine wrote: the `input`
    string, or the arguments as they are when they are not that shape."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get("input"), str):
        return parsed["input"]
    return arguments


def usage(chat: dict[str, Any]) -> dict[str, Any]:
    """Chat usage as Responses usage."""
    prompt = chat.get("prompt_tokens") or 0
    completion = chat.get("completion_tokens") or 0
    cached = (chat.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (chat.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": chat.get("total_tokens") or prompt + completion}
