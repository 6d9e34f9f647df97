"""One bridged call, transport aside: the agent's body in, the engine's request out; the
engine's answer in, the agent's events (or body) out.

`BridgedCall.open` parses the agent's body, has the dialect's translator build the Chat
Completions request and asks the engine for its tokens the way every engine call does
(`engine.ask_for_tokens`), plus `stream_options.include_usage` when streamed (the usage
chunk is where a dialect's closing usage comes from). Then `start(status, encoding)` once the
engine's response headers are in, and each body chunk as it arrives. What comes out is
events (`BridgedCall.events(chunk)`, `final_events()` for a stream, `answer()` for a whole
body or an error: a WebSocket transport sends each event as a message, `base.messages`) or
bytes framed for HTTP (`HttpBridge`).

An engine error (status >= 400) is read whole and becomes the dialect's own error body with
the same status; an `{"error": ...}` chunk inside a stream becomes the dialect's error event.
A translator fault on one chunk is logged and counted in `faults`; the stream goes on.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from forge_record import content_encoding
from forge_record.bridge.base import (
    ChatStream,
    Framer,
    Translator,
    Untranslatable,
    body,
    error_message,
    framer_for,
)
from forge_record.decoders.base import is_event_stream
from forge_record.engine import ask_for_tokens

log = logging.getLogger("forge_record")

CHAT_PATH = "/v1/chat/completions"
TOKENIZE_PATH = "/tokenize"  # vLLM's and SGLang's: the prompt's ids for chat messages


class BridgedCall:
    """The state of one bridged call. `request_body` is what to send the engine."""

    def __init__(self, translator: Translator, request_body: bytes,
                 refused: str | None = None, counting: bool = False) -> None:
        self.translator = translator
        self.request_body = request_body
        self.refused = refused  # why the request cannot be bridged, if it cannot
        self.counting = counting  # a token count, asked of the engine's /tokenize
        self.streamed = translator.streamed and not counting
        self.status = 200
        self.faults = 0  # chunks the translator could not translate
        self._stream: ChatStream | None = None
        self._whole: list[bytes] = []
        self._unencode: content_encoding.ContentDecoder = content_encoding.Identity()
        self._ended = False

    @classmethod
    def open(cls, translator_cls: type[Translator], agent_body: bytes,
             *, path: str, model: str | None, top_logprobs: int = 0,
             counting: bool = False) -> BridgedCall:
        """The call for the agent's request. One that cannot be bridged (a body that is not
        a JSON object, a field the translator refuses) has `refused` set to why: the agent
        gets its dialect's 400, and the engine is not called. `counting`: the agent asks
        for a token count (Anthropic's count_tokens): the engine's `/tokenize` is asked for
        the same messages and tools, rendered as for the call."""
        try:
            request = orjson.loads(agent_body)
        except orjson.JSONDecodeError:
            request = None
        # A translator's constructor only keeps the request: it cannot fail, so even a body
        # that is not JSON gets its error in the agent's dialect.
        translator = translator_cls(request if isinstance(request, dict) else {},
                                    path=path, model=model)
        if not isinstance(request, dict):
            return cls(translator, b"", refused="the request body is not a JSON object")
        try:
            chat = translator.chat_request()
        except Untranslatable as e:
            return cls(translator, b"", refused=str(e))
        if counting:
            ask = {"model": chat.get("model"), "messages": chat["messages"],
                   "add_generation_prompt": True}
            if chat.get("tools"):
                ask["tools"] = chat["tools"]
            return cls(translator, orjson.dumps(ask), counting=True)
        if translator.streamed:
            chat["stream"] = True
            chat["stream_options"] = {**(chat.get("stream_options") or {}),
                                      "include_usage": True}
        asked = ask_for_tokens(orjson.dumps(chat), top_logprobs)
        assert asked is not None  # a dict always dumps to a JSON object
        return cls(translator, asked[0])

    # --- the engine's answer --------------------------------------------------------------

    def start(self, status: int, encoding: str = "", event_stream: bool = True) -> None:
        """The engine's response headers: its status, Content-Encoding, and whether its body
        is SSE (a stream is read chunk by chunk, anything else whole)."""
        self.status = status
        unencode = content_encoding.decoder_for(encoding or None)
        self._unencode = unencode if unencode is not None else content_encoding.Identity()
        if status < 400 and self.streamed and event_stream:
            self._stream = ChatStream()

    @property
    def failed(self) -> bool:
        return self.status >= 400

    @property
    def streaming(self) -> bool:
        """Whether the answer is translated as a stream (else read whole)."""
        return self._stream is not None

    def events(self, chunk: bytes) -> list[dict[str, Any]]:
        """The agent's events for a chunk of a streamed answer (none for a whole one)."""
        plain = self._unencode.decode(chunk)
        if self._stream is None:
            self._whole.append(plain)
            return []
        return self._translate(self._stream.feed(plain))

    def final_events(self) -> list[dict[str, Any]]:
        """The agent's events at the end of a streamed answer."""
        assert self._stream is not None
        return self._translate(self._stream.flush())

    def answer(self) -> dict[str, Any]:
        """At the end of a whole answer (or an error): the agent's body."""
        raw = b"".join(self._whole) + self._unencode.flush()
        if self.failed:
            return self.translator.error(self.status, error_message(raw))
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return self.translator.error(502, f"the engine's answer is not JSON: {raw[:200]!r}")
        if self.counting and isinstance(data, dict) and isinstance(data.get("count"), int):
            return self.translator.count(data["count"])  # type: ignore[attr-defined]
        if not isinstance(data, dict) or "choices" not in data:
            return self.translator.error(502, error_message(raw))
        return self.translator.whole(data)

    def _translate(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for chunk in chunks:
            try:
                if chunk.get("error") is not None:
                    events.append(self._error_event(chunk))
                else:
                    events.extend(self.translator.events(chunk))
            except Exception:  # noqa: BLE001 - one bad chunk must not end the agent's stream
                self.faults += 1
                log.exception("forge-record: bridge could not translate a chunk")
        assert self._stream is not None
        if self._stream.done and not self._ended:
            self._ended = True
            try:
                events.extend(self.translator.end())
            except Exception:  # noqa: BLE001
                self.faults += 1
                log.exception("forge-record: bridge could not end the stream")
        return events

    def _error_event(self, chunk: dict[str, Any]) -> dict[str, Any]:
        err = chunk["error"]
        code = err.get("code") if isinstance(err, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 500
        return self.translator.error(status, error_message(orjson.dumps(chunk)))


class HttpBridge:
    """A bridged call over HTTP: the engine's body chunks in, the agent's bytes out, framed
    for its dialect (a stream event by event, never buffered; a whole answer at its end)."""

    def __init__(self, call: BridgedCall, path: str) -> None:
        self.call = call
        self._framer: Framer = framer_for(call.translator.dialect, path)

    def start(self, status: int, encoding: str, engine_content_type: str) -> str:
        """The engine's headers are in: the content type to give the agent."""
        self.call.start(status, encoding, is_event_stream(engine_content_type))
        return self._framer.content_type if self.call.streaming else "application/json"

    def feed(self, chunk: bytes) -> bytes:
        events = self.call.events(chunk)
        return self._framer.frame(events) if events else b""

    def flush(self) -> bytes:
        if not self.call.streaming:
            return body(self.call.answer())
        return self._framer.frame(self.call.final_events()) + self._framer.close()
