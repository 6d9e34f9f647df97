"""The Responses bridge: an OpenAI Responses call (Codex, over HTTP SSE or its WebSocket)
answered by an engine that speaks Chat Completions only.

`ResponsesTranslator` is the bridge's Translator for `openai.responses`: the request goes
through `responses_request`, the engine's chunks through `responses_events`.

`previous_response_id`: chat is stateless, so the engine must get the whole context. A
bridged response that completes is remembered in `HISTORY` (its id -> the chat messages of its
context and its answer, the instructions left out, as the API carries them over); a request
naming a known id gets that context before its own input, one naming an unknown id the API's
400 `previous_response_not_found`. The map is bounded (least recently used ids go first) and
per process: a chain that moves to another replica of a gateway does not resolve there.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, ClassVar

from forge_record.bridge.base import Untranslatable
from forge_record.bridge.responses_events import ResponseEvents, new_id
from forge_record.bridge.responses_request import ToolNames, translate

_NOT_FOUND = "Previous response with id '{}' not found."
NOT_FOUND_PREFIX = _NOT_FOUND.partition("{")[0]
_CONTEXT_OVERFLOW = "maximum context length"  # vLLM's words for a prompt too long
_ECHO_DEFAULTS: dict[str, Any] = {
    "instructions": None, "max_output_tokens": None, "parallel_tool_calls": True,
    "previous_response_id": None, "reasoning": {"effort": None, "summary": None},
    "store": True, "temperature": 1.0, "text": {"format": {"type": "text"}},
    "tool_choice": "auto", "tools": [], "top_p": 1.0, "metadata": {},
}


class History:
    """Response id -> the chat messages a later call naming it starts with. Bounded, shared
    by the calls of one process (its methods may be called from several threads)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._contexts: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._contexts)

    def get(self, response_id: str) -> list[dict[str, Any]] | None:
        with self._lock:
            context = self._contexts.get(response_id)
            if context is not None:
                self._contexts.move_to_end(response_id)
            return context

    def put(self, response_id: str, context: list[dict[str, Any]]) -> None:
        with self._lock:
            self._contexts[response_id] = context
            self._contexts.move_to_end(response_id)
            while len(self._contexts) > self.size:
                self._contexts.popitem(last=False)


HISTORY = History()


class ResponsesTranslator:
    dialect: ClassVar[str] = "openai.responses"

    def __init__(self, request: dict, *, path: str, model: str | None,
                 history: History | None = None) -> None:
        self.request = request
        self.model = model
        self.streamed = bool(request.get("stream"))
        self.history = HISTORY if history is None else history
        self.dropped: list[str] = []  # server tools offered, not sent to the engine
        self._context: list[dict[str, Any]] | None = None
        self._failed = False  # a response.failed event went out: nothing follows it
        self._stream = ResponseEvents(self._created(), ToolNames())

    @property
    def flags(self) -> list[str]:
        """What the record of this call should say about its translation."""
        return [f"bridge_dropped_tool:{kind}" for kind in self.dropped]

    def chat_request(self) -> dict:
        previous = self.request.get("previous_response_id")
        history: list[dict[str, Any]] = []
        if previous is not None:
            found = self.history.get(previous) if isinstance(previous, str) else None
            if found is None:
                raise Untranslatable(_NOT_FOUND.format(previous))
            history = list(found)
        done = translate(self.request, self.model, history)
        self.dropped, self._context = done.dropped, done.context
        self._stream.names = done.names
        return done.chat

    def events(self, chunk: dict) -> list[dict]:
        return self._stream.chunk(chunk)

    def end(self) -> list[dict]:
        if self._failed:
            return []
        events = self._stream.end()
        self._remember()
        return events

    def whole(self, answer: dict) -> dict:
        """A whole chat answer folded as one chunk: the same items as a stream gives."""
        self._stream.chunk(_as_chunk(answer))
        self.end()
        return self._stream.response

    def warm_up(self) -> list[dict]:
        """A `"generate": false` call (Codex's WebSocket warm-up): created and completed, no
        output, the engine not called; its id can be named like any other."""
        self._stream.finish_reason = "stop"
        return self._stream.start() + self.end()

    def error(self, status: int, message: str) -> dict:
        """The API's error body; once a stream has begun, its `response.failed` event."""
        error = {"message": message, "type": _error_type(status), "param": None,
                 "code": None}
        if message.startswith(NOT_FOUND_PREFIX):
            error.update(code="previous_response_not_found", param="previous_response_id")
        elif _CONTEXT_OVERFLOW in message:
            error["code"] = "context_length_exceeded"
        if not self._stream.started:
            return {"error": error}
        self._failed = True
        response = dict(self._stream.response, status="failed", output=self._stream.output,
                        error={"code": error["code"] or error["type"], "message": message})
        return self._stream.event("response.failed", response=response)

    @property
    def response_id(self) -> str:
        return self._stream.response["id"]

    def _created(self) -> dict[str, Any]:
        echo = {k: self.request.get(k, default) for k, default in _ECHO_DEFAULTS.items()}
        if echo["reasoning"] is None:
            echo["reasoning"] = _ECHO_DEFAULTS["reasoning"]
        return {"id": new_id("resp"), "object": "response", "created_at": int(time.time()),
                "status": "in_progress", "background": False, "error": None,
                "incomplete_details": None, "model": self.model or self.request.get("model"),
                "output": [], "truncation": "disabled", "usage": None, **echo}

    def _remember(self) -> None:
        stream = self._stream
        if self._context is None or stream.response["status"] != "completed":
            return
        answer = [stream.message] if stream.message and (
            stream.message["content"] or stream.message.get("tool_calls")) else []
        self.history.put(self.response_id, self._context + answer)


def _as_chunk(answer: dict[str, Any]) -> dict[str, Any]:
    choices = answer.get("choices") or [{}]
    choice = choices[0]
    delta = dict(choice.get("message") or {})
    delta["tool_calls"] = [dict(call, index=i) for i, call in
                           enumerate(delta.get("tool_calls") or ())]
    return {"model": answer.get("model"), "usage": answer.get("usage"),
            "choices": [{"index": 0, "delta": delta,
                         "finish_reason": choice.get("finish_reason")}]}


def _error_type(status: int) -> str:
    if status in (401, 403):
        return "authentication_error" if status == 401 else "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    return "invalid_request_error" if status < 500 else "server_error"
