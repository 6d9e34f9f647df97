"""What every dialect decoder offers the addon, and the pieces the dialects share to offer it.

A dialect knows one model API: which requests belong to it, how to read a request body into
a `Request`, and how to fold a response body into a `Response`. Response decoders are pure,
incremental folds: `feed(chunk)` takes content-decoded body bytes split anywhere (inside an
SSE line, inside a UTF-8 character), `finish()` ends the fold and returns what was seen, even
when the stream stopped early. They do no I/O. They may raise `DecodeError` on input that
breaks the protocol; the addon catches every exception, keeps the raw bytes and flags the
exchange, so a decoder bug can never reach the agent's stream.

Shared here: `decode_object` (a JSON object body through a converter, every failure a
`DecodeError`), `BufferedBody` and `JsonBodyDecoder` (a whole, non-streamed response body),
and `is_event_stream` (which content types are SSE).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import orjson

from forge_record.errors import DecodeError
from forge_record.records import Request, Response

# What reading a JSON value of an unexpected shape raises (a list where a dict was due, a
# missing key, a string index, ...). Converters let these escape; callers decide whether
# that is a `DecodeError` or a flag on the record.
SHAPE_ERRORS = (TypeError, AttributeError, ValueError, KeyError, IndexError)


class ResponseDecoder(Protocol):
    def feed(self, chunk: bytes) -> None: ...

    def finish(self) -> Response: ...

    @property
    def complete(self) -> bool:
        """True once the protocol's terminal event (or a whole JSON body) was seen."""
        ...


class Dialect(Protocol):
    name: str  # e.g. "anthropic.messages"

    def matches(self, method: str, path: str) -> bool:
        """Whether a request with this method and path (query included) is this dialect's."""
        ...

    def kind(self, path: str) -> str:
        """"model" for a model turn, "side" for calls that are not one (count_tokens)."""
        ...

    def parse_request(self, body: bytes) -> Request: ...

    def response_decoder(self, content_type: str) -> ResponseDecoder:
        """A decoder for a response body of this content type (SSE or JSON)."""
        ...


def is_event_stream(content_type: str) -> bool:
    """Whether a Content-Type header names SSE (parameters and case do not matter)."""
    return content_type.partition(";")[0].strip().lower() == "text/event-stream"


def load_object(body: bytes, what: str) -> dict[str, Any]:
    """`body` parsed as a JSON object; `what` ("request body") names it in the DecodeError."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise DecodeError(f"{what} is not JSON: {e}") from e
    if not isinstance(data, dict):
        raise DecodeError(f"{what} is not a JSON object")
    return data


def decode_object[T](body: bytes, what: str, convert: Callable[[dict[str, Any]], T]) -> T:
    """`convert` applied to `body` parsed as a JSON object. Bad JSON, another JSON value, or
    an object `convert` cannot read (one of SHAPE_ERRORS) raise `DecodeError`."""
    data = load_object(body, what)
    try:
        return convert(data)
    except SHAPE_ERRORS as e:
        raise DecodeError(f"{what} has an unexpected shape: {e!r}") from e


class BufferedBody:
    """A response body that is only read whole: `feed` keeps the chunks, subclasses read
    `body` in `finish` and set `_complete` when what they read was whole."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._complete = False

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def body(self) -> bytes:
        return b"".join(self._chunks)

    def feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)


class JsonBodyDecoder(BufferedBody):
    """A whole JSON object body, turned into a Response by `convert` at finish."""

    def __init__(self, convert: Callable[[dict[str, Any]], Response]) -> None:
        super().__init__()
        self._convert = convert

    def finish(self) -> Response:
        response = decode_object(self.body, "response body", self._convert)
        self._complete = True  # an error body is whole too; Response.error tells it apart
        return response
