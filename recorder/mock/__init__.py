"""A scripted model API on 127.0.0.1, for tests, benchmarks and offline self-checks.

`MockUpstream` is a small threaded HTTP/1.1 server. Each dialect lives in its own module
(`anthropic`, ...) and offers `ROUTES`: (method, path predicate, responder) triples; a
responder turns a `Received` request into a `Reply`, whose body is bytes or an iterator of
chunks sent as they come (chunked transfer encoding), so streams arrive in realistic pieces.
Replies are deterministic (ids derive from the request), so a direct call and a proxied call
can be compared byte for byte. Every request is kept in `requests` for assertions.
"""

from __future__ import annotations

import gzip
import socket
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from forge_record.content_encoding import decode_body

TOOL_MARKER = "forge-record-e2e"
HOLD_FOR = 120.0  # the longest a held stream waits (a test that forgot to release it)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON, its Content-Encoding (gzip, zstd, ...) undone."""
        body = decode_body(self.headers.get("content-encoding"), self.body)
        return orjson.loads(body if body is not None else self.body)


@dataclass
class Reply:
    status: int = 200
    body: bytes | Iterable[bytes] = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Reply:
        return cls(status=status, body=orjson.dumps(data))

    @classmethod
    def stream(cls, chunks: Iterable[bytes]) -> Reply:
        return cls(body=chunks, content_type="text/event-stream; charset=utf-8")


class CutStream(Exception):
    """Raised by a reply's chunk iterator to make the mock drop the connection mid-stream."""


Responder = Callable[["MockUpstream", Received], Reply]
Route = tuple[str, Callable[[str], bool], Responder]

NOT_FOUND = Reply.json({"error": {"type": "not_found_error", "message": "no such path"}}, 404)


def default_routes() -> list[Route]:
    from forge_record.mock import anthropic, gemini, openai, sglang, vllm

    # vllm and sglang answer only when options["engine"] names them
    return [*anthropic.ROUTES, *gemini.ROUTES, *openai.ROUTES, *vllm.ROUTES, *sglang.ROUTES]


@dataclass
class MockUpstream:
    """`options` are read by the responders (e.g. "anthropic_script"). `port` 0 (the
    default) takes a free one; `forge-record mock --port N` picks its own."""

    gzip_responses: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    routes: list[Route] = field(default_factory=default_routes)
    requests: list[Received] = field(default_factory=list)
    websockets: list[Any] = field(default_factory=list)  # openai_ws.Connection, one per upgrade
    port: int = 0

    def __post_init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> MockUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def base_urls(self) -> dict[str, str]:
        """Where each dialect's clients point their base URL (the variable: the URL)."""
        return {
            "ANTHROPIC_BASE_URL": self.url,  # Messages API: /v1/messages, count_tokens
            "OPENAI_BASE_URL": f"{self.url}/v1",  # Chat Completions and Responses (+ WebSocket)
            "GOOGLE_GEMINI_BASE_URL": self.url,  # Gemini API: /v1beta/models/...
        }

    def reply_to(self, request: Received) -> Reply:
        path = request.path.split("?")[0]
        for method, matches, respond in self.routes:
            if method == request.method and matches(path):
                return respond(self, request)
        return NOT_FOUND


def hold(options: dict[str, Any]) -> None:
    """Option "hold" (a threading.Event), for fault tests: a stream stops after its first
    event until the event is set, so a test knows for sure that a call is in flight. Streamed
    Messages (anthropic) and WebSocket Responses (openai_ws) answers obey it."""
    gate = options.get("hold")
    if gate is not None:
        gate.wait(HOLD_FOR)


def _handler_for(mock: MockUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Streams are written an event at a time; without this, Nagle's algorithm holds
            # small events back for tens of milliseconds.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def do_HEAD(self) -> None:
            self._receive()
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            received = self._receive()
            from forge_record.mock import openai_ws

            if openai_ws.is_upgrade(received):
                openai_ws.serve(mock, self, received)
                return
            self._send(mock.reply_to(received))

        do_POST = do_GET

        def _receive(self) -> Received:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            received = Received(self.command, self.path, headers, body)
            mock.requests.append(received)
            return received

        def _send(self, reply: Reply) -> None:
            self.send_response(reply.status)
            self.send_header("content-type", reply.content_type)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if isinstance(reply.body, bytes):
                self._send_whole(reply.body)
            else:
                self._send_chunked(reply.body)

        def _send_whole(self, body: bytes) -> None:
            if mock.gzip_responses:
                body = gzip.compress(body, mtime=0)
                self.send_header("content-encoding", "gzip")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _send_chunked(self, chunks: Iterable[bytes]) -> None:
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            if mock.gzip_responses:
                self.send_header("content-encoding", "gzip")
                chunks = _gzip_stream(chunks)
            self.end_headers()
            try:
                for chunk in chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            except CutStream:  # an upstream reset: no terminating chunk, socket closed
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            except (BrokenPipeError, ConnectionResetError):  # the client went away
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def _gzip_stream(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """gzip that flushes after every chunk, as a compressing server streams SSE."""
    z = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    for chunk in chunks:
        if out := z.compress(chunk) + z.flush(zlib.Z_SYNC_FLUSH):
            yield out
    yield z.flush()
