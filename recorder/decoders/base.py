"""What every dialect decoder offers the addon.

A dialect knows one model API: which requests belong to it, how to read a request body into
a `Request`, and how to fold a response body into a `Response`. Response decoders are pure,
incremental folds: `feed(chunk)` takes content-decoded body bytes split anywhere (inside an
SSE line, inside a UTF-8 character), `finish()` ends the fold and returns what was seen, even
when the stream stopped early. They do no I/O. They may raise `DecodeError` on input that
breaks the protocol; the addon catches every exception, keeps the raw bytes and flags the
exchange, so a decoder bug can never reach the agent's stream.
"""

from __future__ import annotations

from typing import Protocol

from forge_record.records import Request, Response


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
