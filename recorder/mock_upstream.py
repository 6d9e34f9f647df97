"""A scripted model API on 127.0.0.1, for tests, benchmarks and offline self-checks.

It speaks the Anthropic Messages API well enough for the official SDK and Claude Code: JSON
or SSE (`"stream": true`), with streams cut into realistic pieces (tool input JSON split
inside keys, text in short deltas). What it answers is decided by a `script`: a function from
the request body to an assistant message; `agent_script` asks for one Bash tool call and then
answers with what the tool printed. Responses are deterministic (ids derive from the request),
so a direct call and a proxied call can be compared byte for byte. Every request it receives
is kept in `requests` for assertions.
"""

from __future__ import annotations

import gzip
import hashlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson

Script = Callable[[dict], dict]
TOOL_MARKER = "forge-record-e2e"


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return orjson.loads(self.body)


def _ids(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:24]


def text_message(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


def agent_script(request: dict) -> dict:
    """Ask for a Bash call when the prompt carries TOOL_MARKER; once the tool result comes
    back, answer with it. Any other request (titles, summaries) gets a short text."""
    # The newest user turn; Claude Code may append a system-role message after it.
    users = [m for m in request.get("messages") or [] if m.get("role") == "user"]
    last = users[-1] if users else {"content": ""}
    blocks = last["content"] if isinstance(last["content"], list) else []
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if results:
        output = results[0].get("content")
        if isinstance(output, list):
            output = "".join(b.get("text", "") for b in output)
        return text_message(f"The command printed: {output}")
    prompt = orjson.dumps(last["content"]).decode()
    if TOOL_MARKER in prompt and any(t.get("name") == "Bash" for t in request.get("tools", [])):
        command = f"echo {TOOL_MARKER}-output-$((6*7))"
        return {
            "content": [
                {"type": "text", "text": "I'll run that command."},
                {
                    "type": "tool_use",
                    "id": "toolu_01" + _ids(prompt.encode())[:22],
                    "name": "Bash",
                    "input": {"command": command, "description": "Print a marker"},
                },
            ],
            "stop_reason": "tool_use",
        }
    return text_message("OK from the mock.")


def full_message(request: dict, reply: dict, body: bytes) -> dict:
    return {
        "id": "msg_01" + _ids(body),
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "claude-mock"),
        "content": reply["content"],
        "stop_reason": reply["stop_reason"],
        "stop_sequence": None,
        "usage": {
            "input_tokens": 100 + len(body) // 1000,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 20,
        },
    }


def sse_events(message: dict) -> Iterator[bytes]:
    """The message as the Messages API streams it, one SSE event per item."""

    def event(name: str, data: dict) -> bytes:
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    start = dict(message, content=[], stop_reason=None)
    start["usage"] = dict(message["usage"], output_tokens=1)
    yield event("message_start", {"type": "message_start", "message": start})
    yield event("ping", {"type": "ping"})
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield event("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": {"type": "text", "text": ""}})
            for piece in _pieces(block["text"], 8):
                yield event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "text_delta", "text": piece}})
        else:
            yield event("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": dict(block, input={})})
            raw = orjson.dumps(block["input"]).decode()
            for piece in ["", *_pieces(raw, 7)]:
                yield event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "input_json_delta",
                                                              "partial_json": piece}})
        yield event("content_block_stop", {"type": "content_block_stop", "index": i})
    yield event("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": message["stop_reason"],
                                            "stop_sequence": None},
                                  "usage": {"output_tokens": message["usage"]["output_tokens"]}})
    yield event("message_stop", {"type": "message_stop"})


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


@dataclass
class MockUpstream:
    script: Script = agent_script
    gzip_responses: bool = False
    requests: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
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

    def model_requests(self) -> list[Received]:
        return [r for r in self.requests if r.method == "POST" and "/v1/messages" in r.path
                and "count_tokens" not in r.path]


def _handler_for(mock: MockUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def do_HEAD(self) -> None:
            self._record(b"")
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self._record(b"")
            self._send_json(404, {"type": "error", "error": {"type": "not_found_error",
                                                             "message": "no such path"}})

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            self._record(body)
            path = self.path.split("?")[0]
            request = orjson.loads(body) if body else {}
            if path == "/v1/messages/count_tokens":
                return self._send_json(200, {"input_tokens": 42})
            if path != "/v1/messages":
                return self.do_GET()
            message = full_message(request, mock.script(request), body)
            if request.get("stream"):
                return self._send_stream(sse_events(message))
            self._send_json(200, message)

        def _record(self, body: bytes) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            mock.requests.append(Received(self.command, self.path, headers, body))

        def _send_json(self, status: int, data: dict) -> None:
            payload = orjson.dumps(data)
            self.send_response(status)
            self.send_header("content-type", "application/json")
            if mock.gzip_responses:
                payload = gzip.compress(payload, mtime=0)
                self.send_header("content-encoding", "gzip")
            self.send_header("request-id", "req_mock_" + _ids(payload))
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _send_stream(self, events: Iterator[bytes]) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            if mock.gzip_responses:
                self.send_header("content-encoding", "gzip")
                events = _gzip_stream(events)
            self.end_headers()
            for chunk in events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def _gzip_stream(events: Iterator[bytes]) -> Iterator[bytes]:
    import zlib

    z = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    for chunk in events:
        out = z.compress(chunk) + z.flush(zlib.Z_SYNC_FLUSH)
        if out:
            yield out
    yield z.flush()
