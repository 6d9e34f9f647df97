"""The dialect bridge's interface: what a translator offers, how its events are framed, and
how the engine's Chat Completions stream is read.

An engine (vLLM, SGLang) returns its token ids only on Chat Completions. An agent that speaks
another dialect (Anthropic Messages, Responses, Gemini) is bridged: its request is translated
into a Chat Completions call, and the engine's answer back into the agent's dialect, event by
event. A `Translator` does one call's two translations and nothing else: it is pure (no I/O,
no framing) and sees parsed JSON only. The framework around it (`forge_record.bridge.call`)
asks the engine for its tokens, parses the engine's stream (`ChatStream`), frames the events
(`Framer`) and keeps both sides for the record.

Framing, one rule per wire form: Anthropic and Responses SSE `event: <type>\\ndata: <json>\\n\\n`
(`NamedSSE`); Gemini `data: <json>\\r\\n\\r\\n` (`DataSSE`) or, streamed without `alt=sse`, one JSON
array written element by element (`JsonArray`); Responses over WebSocket one text message per
event (`messages`). A non-streamed answer is one JSON body.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import orjson

from forge_record.sse import SSEDecoder


class Untranslatable(Exception):
    """A request the bridge cannot express as a Chat Completions call (a server tool, an
    unknown block type). The message says what, for the agent's error and the count."""


class Translator(Protocol):
    """One call's translation, in both directions. One instance per call; pure, no I/O."""

    dialect: ClassVar[str]  # "anthropic.messages" | "openai.responses" | "gemini.generate"
    streamed: bool  # whether the agent asked for a stream

    def __init__(self, request: dict, *, path: str, model: str | None) -> None:
        """`request`: the agent's parsed JSON body; `path`: its request path (Gemini's model
        and streamed-ness are in it); `model`: the engine's served model name to put in the
        chat request (None: keep the agent's)."""

    def chat_request(self) -> dict:
        """The Chat Completions request (raises Untranslatable). Without the token asks: the
        framework adds `return_token_ids`/`logprobs`/`top_logprobs` and, when streamed,
        `stream_options.include_usage`."""
        ...

    def events(self, chunk: dict) -> list[dict]:
        """One parsed engine chat chunk -> the agent's events."""
        ...

    def end(self) -> list[dict]:
        """The engine's stream ended (`[DONE]`, or its body ended) -> the closing events."""
        ...

    def whole(self, answer: dict) -> dict:
        """A non-streamed chat answer -> the agent's body."""
        ...

    def error(self, status: int, message: str) -> dict:
        """The dialect's own error body for an HTTP status and a message."""
        ...

    # Optional: a dialect with a token-count route (Anthropic's count_tokens) defines
    #     def count(self, tokens: int) -> dict: ...  # the engine's count -> the agent's body
    # and its count requests are answered from the engine's /tokenize (bridge.call).


# --- the engine's side: Chat Completions SSE in, parsed chunks out ------------------------


class ChatStream:
    """The engine's streamed chat answer, body bytes split anywhere in, parsed chunks out.
    `done` turns true at `data: [DONE]`. A data line that is not a JSON object is skipped
    (the record keeps the engine's bytes; the agent's stream goes on)."""

    def __init__(self) -> None:
        self._sse = SSEDecoder()  # frames with sse.LineFramer
        self.done = False

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        return self._parsed(self._sse.feed(chunk))

    def flush(self) -> list[dict[str, Any]]:
        return self._parsed(self._sse.flush())

    def _parsed(self, events) -> list[dict[str, Any]]:
        chunks = []
        for event in events:
            if event.data == "[DONE]":
                self.done = True
                continue
            try:
                chunk = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                continue
            if isinstance(chunk, dict):
                chunks.append(chunk)
        return chunks


def error_message(body: bytes) -> str:
    """The message of an engine's error body (OpenAI's `{"error": {"message": ...}}`, or
    FastAPI's `{"detail": ...}`), else the body's text."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace").strip() or "engine error"
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
        if data.get("detail") is not None:
            detail = data["detail"]
            return detail if isinstance(detail, str) else orjson.dumps(detail).decode()
        if isinstance(data.get("message"), str):
            return data["message"]
    return body.decode("utf-8", "replace")


# --- the agent's side: events framed as its dialect's wire form ----------------------------


class Framer(Protocol):
    content_type: str

    def frame(self, events: list[dict]) -> bytes: ...

    def close(self) -> bytes: ...


class NamedSSE:
    """Anthropic's and Responses' SSE: each event named by its `type`."""

    content_type = "text/event-stream; charset=utf-8"

    def frame(self, events: list[dict]) -> bytes:
        return b"".join(b"event: %s\ndata: %s\n\n" % (str(e.get("type", "message")).encode(),
                                                      orjson.dumps(e)) for e in events)

    def close(self) -> bytes:
        return b""


class DataSSE:
    """Gemini's `alt=sse`: data lines only, ended by CRLF pairs as Google sends them."""

    content_type = "text/event-stream"

    def frame(self, events: list[dict]) -> bytes:
        return b"".join(b"data: %s\r\n\r\n" % orjson.dumps(e) for e in events)

    def close(self) -> bytes:
        return b""


class JsonArray:
    """Gemini's stream without `alt=sse`: one JSON array, written an element at a time."""

    content_type = "application/json; charset=UTF-8"

    def __init__(self) -> None:
        self._started = False

    def frame(self, events: list[dict]) -> bytes:
        out = bytearray()
        for event in events:
            out += b",\r\n" if self._started else b"["
            self._started = True
            out += orjson.dumps(event)
        return bytes(out)

    def close(self) -> bytes:
        return b"]" if self._started else b"[]"


def framer_for(dialect: str, path: str) -> Framer:
    """How a streamed answer in `dialect` is framed on HTTP (WebSocket: `messages`)."""
    if dialect.startswith("gemini."):
        return DataSSE() if "alt=sse" in path.partition("?")[2] else JsonArray()
    return NamedSSE()


def messages(events: list[dict]) -> list[bytes]:
    """Responses over WebSocket: one text message per event."""
    return [orjson.dumps(e) for e in events]


def body(answer: dict) -> bytes:
    """A non-streamed answer or an error body."""
    return orjson.dumps(answer)
