"""What every dialect decoder offers the addon, and the pieces the dialects share to offer it.

A dialect knows one model API: which requests belong to it (its `routes`, matched by the one
rule `Dialect` states for every dialect, over HTTP and WebSocket alike), how to read a request
body into a `Request`, and how to fold a response body into a `Response`. Response decoders
are pure, incremental folds: `feed(chunk)` takes content-decoded body bytes split anywhere
(inside an SSE line, inside a UTF-8 character), `finish()` ends the fold and returns what was
seen, even when the stream stopped early. They do no I/O. They may raise `DecodeError` on input that
breaks the protocol; the addon catches every exception, keeps the raw bytes and flags the
exchange, so a decoder bug can never reach the agent's stream.

Shared here: `decode_object` (a JSON object body through a converter, every failure a
`DecodeError`), `Reused` and `same_json` (the records of values a recent request sent too),
`BufferedBody`
and `JsonBodyDecoder` (a whole, non-streamed response body), and `is_event_stream` (which
content types are SSE).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol
from urllib.parse import unquote

import orjson

from forge_record.decoders.repeats import REPEATS
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


class Dialect:
    """One model API. Subclasses set `name` and `routes`, and implement `parse_request` and
    `response_decoder`; the routing below is the same for every dialect, HTTP and WebSocket.

    Routing rules, decided here once: a request is a dialect's when its method is POST (a
    WebSocket upgrade: GET) and the end of its route path matches one of the dialect's
    `routes` (`websocket_routes` for an upgrade). The route path is the request path without
    the query, percent-decoded, with trailing slashes dropped; a pattern starts at
    a `/`, so it matches whole segments and anything before it is a gateway's prefix
    (`https://gw.example/anthropic/v1/messages`).
    """

    name: str = ""  # e.g. "anthropic.messages"
    # Regular expressions matched at the end of the route path -> the kind of call: "model"
    # for a model turn, "side" for calls that are not one (count_tokens).
    routes: Mapping[str, str] = {}
    websocket_routes: Mapping[str, str] = {}  # the same for GET upgrades to a WebSocket
    # How a JSON body on a host we do not know shows that it speaks this dialect.
    body_keys: tuple[bytes, ...] = (b'"model"',)
    _http: list[tuple[re.Pattern[str], str]] = []  # `routes` compiled, by __init_subclass__
    _websocket: list[tuple[re.Pattern[str], str]] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._http = _compile(cls.routes)
        cls._websocket = _compile(cls.websocket_routes)

    def route(self, method: str, path: str, *, websocket: bool = False) -> re.Match[str] | None:
        """How a request's path matched this dialect's routes, or None if it is not ours."""
        route = routable(method, path, websocket)
        return self.match_route(route, websocket) if route is not None else None

    def match_route(self, route: str, websocket: bool = False) -> re.Match[str] | None:
        """`route` (from `routable`) matched against this dialect's routes, or None."""
        table = self._websocket if websocket else self._http
        return next((m for pattern, _ in table if (m := pattern.search(route))), None)

    def matches(self, method: str, path: str, *, websocket: bool = False) -> bool:
        """Whether a request with this method and path (query included) is this dialect's."""
        return self.route(method, path, websocket=websocket) is not None

    def kind(self, path: str) -> str:
        """"model" for a model turn, "side" for calls that are not one (count_tokens)."""
        route = route_path(path)
        found = (kind for pattern, kind in (*self._http, *self._websocket) if pattern.search(route))
        return next(found, "model")

    def from_url(self, request: Request, url: str) -> None:
        """Fill in what the URL says about the request (Gemini: the model, whether it
        streams). Most dialects carry all of it in the body: nothing to do."""

    def parse_request(self, body: bytes) -> Request:
        raise NotImplementedError

    def response_decoder(self, content_type: str) -> ResponseDecoder:
        """A decoder for a response body of this content type (SSE or JSON)."""
        raise NotImplementedError


def routable(method: str, path: str, websocket: bool = False) -> str | None:
    """The route path of a request whose method can be a model call, else None (the rules
    are `Dialect`'s)."""
    return route_path(path) if method.upper() == ("GET" if websocket else "POST") else None


def route_path(path: str) -> str:
    """The part of a request path that routing reads (see `Dialect`)."""
    return unquote(path.partition("?")[0]).rstrip("/")


def _compile(routes: Mapping[str, str]) -> list[tuple[re.Pattern[str], str]]:
    # Longest pattern first, so a route that extends another (…/responses/compact after
    # …/responses) is tried before it whatever order the table lists them in.
    ordered = sorted(routes.items(), key=lambda item: len(item[0]), reverse=True)
    return [(re.compile(f"(?:{pattern})$"), kind) for pattern, kind in ordered]


def is_event_stream(content_type: str) -> bool:
    """Whether a Content-Type header names SSE (parameters and case do not matter)."""
    return content_type.partition(";")[0].strip().lower() == "text/event-stream"


def load_object(body: bytes, what: str, grows: str | None = None) -> dict[str, Any]:
    """`body` parsed as a JSON object; `what` ("request body") names it in the DecodeError.
    `grows`: the top-level array a conversation extends call after call (`messages`), whose
    elements a recent body already had are not parsed again (decoders.repeats)."""
    try:
        data = REPEATS.loads(body, grows) if grows else orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise DecodeError(f"{what} is not JSON: {e}") from e
    if not isinstance(data, dict):
        raise DecodeError(f"{what} is not a JSON object")
    return data


def decode_object[T](body: bytes, what: str, convert: Callable[[dict[str, Any]], T],
                     grows: str | None = None) -> T:
    """`convert` applied to `body` parsed as a JSON object. Bad JSON, another JSON value, or
    an object `convert` cannot read (one of SHAPE_ERRORS) raise `DecodeError`. The values
    `convert` gets may be shared with an earlier call's (see `grows`): it must not change
    them."""
    data = load_object(body, what, grows)
    try:
        return convert(data)
    except SHAPE_ERRORS as e:
        raise DecodeError(f"{what} has an unexpected shape: {e!r}") from e


class Reused[T]:
    """`convert` over a request's list of JSON values (its tools, its system blocks), giving
    a value equal to the one at the same place in a recent request's list that request's
    record, the very object. An agent sends the same tools and system prompt on every call,
    and they are parsed anew when the bytes around them change (Claude Code's billing block,
    decoders.repeats): with the objects shared, what comes after finds them at once (the
    lineage fold hashes a record once per object, the store's encoder compares a request's
    parts with its parent's). Equal values make equal records, and records are not changed
    once built (store.content.Decoded), as with the messages a request repeats.
    Each recent list is compared place by place, the newest first, and the one that shares
    the most is taken: a main loop, its sub-agents and side calls interleave with different
    tools. (A record is never None: converters make records.)"""

    def __init__(self, convert: Callable[[Any], T], keep: int = 4) -> None:
        self._convert = convert
        self._recent: deque[tuple[list[Any], list[T]]] = deque(maxlen=keep)
        self._lock = threading.Lock()  # the writer may finalize from more than one thread

    def __call__(self, values: list[Any]) -> list[T]:
        if not isinstance(values, list) or not values:
            return [self._convert(v) for v in values]  # what a converter reads of any other
        with self._lock:
            recent = list(self._recent)
        found: list[T | None] = [None] * len(values)
        for old_values, old in reversed(recent):  # the newest first
            same = [old[i] if i < len(old) and same_json(old_values[i], value) else None
                    for i, value in enumerate(values)]
            if sum(r is not None for r in same) > sum(r is not None for r in found):
                found = same
                if None not in found:
                    break
        records = [self._convert(value) if record is None else record
                   for value, record in zip(values, found, strict=True)]
        with self._lock:
            self._recent.append((values, records))
        return records


def same_json(a: Any, b: Any) -> bool:
    """Whether converting `b` gives what converting `a` gave. Python's == is not enough: it
    holds for 1, 1.0 and true, and for objects whose keys come in another order, which a
    record keeps as they came. The same object (decoders.repeats shares what a body
    repeats), or values orjson writes as the same bytes."""
    if a is b:
        return True
    if a != b:
        return False
    try:
        return orjson.dumps(a) == orjson.dumps(b)
    except TypeError:  # nested deeper than orjson writes: converted anew
        return False


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
