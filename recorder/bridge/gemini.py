"""Gemini `generateContent` / `streamGenerateContent` <-> Chat Completions, for Gemini CLI
(and google-genai) against an engine.

The path says what the agent wants: `…/models/{model}:streamGenerateContent` streams (the
framework frames `data:` events with `?alt=sse`, else one JSON array), `:generateContent`
answers one object. The request is translated by `gemini_request` (its docstring has the
table).

Answer: each engine chunk's content delta is a text part, its reasoning delta (vLLM's
`reasoning`, or `reasoning_content`) a `thought: true` part, sent on as they come, one
`GenerateContentResponse` chunk per engine chunk that says something (`candidates[0].content
.parts`, `modelVersion` the engine's model, `responseId` its chat id). A tool call's
arguments arrive as JSON string pieces, but Gemini sends a `functionCall` part whole, so a
call is held until it is complete (the next call starts, text follows, or the choice
finishes) and then sent as `{"functionCall": {"name", "args"}}`, with no id, as the Gemini
API sends it. Arguments that are not a JSON object are not sent as a call: the answer ends
with `finishReason: MALFORMED_FUNCTION_CALL` and a `finishMessage` holding them, as Gemini
itself reports a call it could not form. After the engine's `[DONE]` a closing chunk carries
the `finishReason` (stop and tool_calls -> STOP, length -> MAX_TOKENS, content_filter ->
SAFETY, anything else OTHER) and `usageMetadata` (promptTokenCount, candidatesTokenCount,
totalTokenCount from the engine's usage chunk, else counted from the token ids it sent).

`countTokens` is answered `{"totalTokens": N}`, N the engine's `/tokenize` count of the same
contents (and system instruction and tools, when a `generateContentRequest` carries them)
rendered as the call's prompt (bridge.call asks it): exact for this engine, where a local
estimate would not be.

Errors are Google's `{"error": {"code", "message", "status"}}`, the status named as the
Gemini API names it.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from forge_record.bridge import gemini_request
from forge_record.decoders.gemini_parts import camel

_FINISH = {"stop": "STOP", "tool_calls": "STOP", "function_call": "STOP",
           "length": "MAX_TOKENS", "content_filter": "SAFETY"}
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
           404: "NOT_FOUND", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED",
           500: "INTERNAL", 501: "NOT_IMPLEMENTED", 503: "UNAVAILABLE",
           504: "DEADLINE_EXCEEDED"}
MALFORMED = "MALFORMED_FUNCTION_CALL"


def route(path: str) -> tuple[str, str]:
    """The model and the method of `…/models/{model}:{method}[?query]`."""
    target = path.partition("?")[0].rpartition("/models/")[2]
    model, _, method = target.partition(":")
    return model, method


class GeminiTranslator:
    dialect: ClassVar[str] = "gemini.generate"

    def __init__(self, request: dict, *, path: str, model: str | None) -> None:
        self.request = request
        self.agent_model, method = route(path)
        self.model = model or self.agent_model
        self.streamed = method == "streamGenerateContent"
        self._calls = CallFold()
        self._ids: dict[str, Any] = {}  # responseId and modelVersion, from the engine
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._counted = [0, 0]  # prompt and completion token ids seen, when no usage comes

    def chat_request(self) -> dict:
        request = self.request
        inner = camel(request).get("generateContentRequest")  # countTokens' long form
        if isinstance(inner, dict):
            request = inner
        return gemini_request.chat_request(request, self.model)

    def count(self, tokens: int) -> dict:
        """countTokens' answer: the engine's count of the rendered prompt."""
        return {"totalTokens": tokens}

    # --- streamed ------------------------------------------------------------------------

    def events(self, chunk: dict) -> list[dict]:
        self._note(chunk)
        parts: list[dict[str, Any]] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            self._counted[1] += len(choice.get("token_ids") or ())
            delta = choice.get("delta") or {}
            text_parts = _text_parts(delta)
            if text_parts:  # text after a call: the call is complete
                parts += self._calls.complete()
            parts += text_parts
            for piece in delta.get("tool_calls") or ():
                parts += self._calls.add(piece)
            if choice.get("finish_reason"):
                parts += self._calls.complete()
                self._finish = choice["finish_reason"]
        return [self._response(parts)] if parts else []

    def end(self) -> list[dict]:
        parts = self._calls.complete()
        if self._finish is None and self._usage is None:
            return [self._response(parts)] if parts else []
        return [self._response(parts, closing=True)]

    # --- whole ---------------------------------------------------------------------------

    def whole(self, answer: dict) -> dict:
        self._note(answer)
        choice = (answer.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        parts = _text_parts(message)
        for n, call in enumerate(message.get("tool_calls") or ()):
            parts += self._calls.add({**call, "index": n})
        parts += self._calls.complete()
        self._finish = choice.get("finish_reason")
        self._counted[1] = len(choice.get("token_ids") or ())
        return self._response(parts, closing=True)

    def error(self, status: int, message: str) -> dict:
        name = _STATUS.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
        return {"error": {"code": status, "message": message, "status": name}}

    # --- building the answer -------------------------------------------------------------

    def _note(self, chunk: dict) -> None:
        if chunk.get("id") and "responseId" not in self._ids:
            self._ids = {"modelVersion": chunk.get("model") or self.model,
                         "responseId": chunk["id"]}
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        if chunk.get("prompt_token_ids"):
            self._counted[0] = len(chunk["prompt_token_ids"])

    def _response(self, parts: list[dict], closing: bool = False) -> dict:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
        out: dict[str, Any] = {"candidates": [candidate]}
        if closing:
            if self._calls.malformed:
                candidate["finishReason"] = MALFORMED
                candidate["finishMessage"] = self._calls.malformed
            elif self._finish is not None:
                candidate["finishReason"] = _FINISH.get(self._finish, "OTHER")
            out["usageMetadata"] = self._usage_metadata()
        candidate["index"] = 0
        return {**out, **self._ids}

    def _usage_metadata(self) -> dict[str, int]:
        usage = self._usage or {}
        prompt = usage.get("prompt_tokens", self._counted[0])
        answer = usage.get("completion_tokens", self._counted[1])
        return {"promptTokenCount": prompt, "candidatesTokenCount": answer,
                "totalTokenCount": usage.get("total_tokens", prompt + answer)}


def _text_parts(delta: dict[str, Any]) -> list[dict[str, Any]]:
    """A delta's (or message's) reasoning and text, as thought and text parts."""
    parts = []
    thought = delta.get("reasoning") or delta.get("reasoning_content")
    if isinstance(thought, str) and thought:
        parts.append({"text": thought, "thought": True})
    if isinstance(delta.get("content"), str) and delta["content"]:
        parts.append({"text": delta["content"]})
    return parts


class CallFold:
    """Tool calls whose arguments arrive in pieces, by index; whole `functionCall` parts out
    once complete. A call whose arguments are not a JSON object goes to `malformed`."""

    def __init__(self) -> None:
        self._open: dict[int, dict[str, Any]] = {}  # index -> {"name", "arguments": [str]}
        self.malformed: str | None = None

    def add(self, piece: dict[str, Any]) -> list[dict[str, Any]]:
        """One tool-call delta; the parts of calls it completes (a later index started)."""
        index = piece.get("index", 0)
        done = self.complete(before=index) if index not in self._open else []
        call = self._open.setdefault(index, {"name": "", "arguments": []})
        function = piece.get("function") or {}
        if function.get("name"):
            call["name"] = function["name"]
        if function.get("arguments"):
            call["arguments"].append(function["arguments"])
        return done

    def complete(self, before: int | None = None) -> list[dict[str, Any]]:
        """The open calls (those below `before`), in index order, as parts."""
        if not self._open:  # the usual case: text, no call in the making
            return []
        ready = sorted(i for i in self._open if before is None or i < before)
        return [p for p in (self._part(self._open.pop(i)) for i in ready) if p is not None]

    def _part(self, call: dict[str, Any]) -> dict[str, Any] | None:
        raw = "".join(call["arguments"])
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError:
            args = None
        if not isinstance(args, dict):
            self.malformed = self.malformed or f"Malformed function call: {call['name']}: {raw}"
            return None
        return {"functionCall": {"name": call["name"], "args": args}}
