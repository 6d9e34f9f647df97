"""The mock's OpenAI Responses API over a WebSocket (`GET /v1/responses` upgraded), as
Codex's built-in provider uses it. (HTTP `POST /v1/responses` lives in `openai`.)

RFC 6455 framing is written here on the mock's HTTP handler; permessage-deflate (RFC 7692,
context takeover kept) is accepted when offered, unless `options["openai_ws_deflate"]` is
False. Each client `response.create` text frame is answered with the very events the SSE
route streams for the same request (same script, same cuts), one JSON text frame each,
ending in `response.completed`. As the API does on one socket, `previous_response_id` names
an earlier response of the connection, whose input and output come before the new `input`; a
response made with `"store": true` can be named from another connection too (the API keeps
stored responses); an unknown id gets Codex's wrapped `error` frame. A warm-up
(`"generate": false`) gets `response.created` and `response.completed` with no output; its id
can be named like any other. Every frame, both ways, is kept in `mock.websockets` (one
`Connection` per upgrade), so a test can check what crossed the socket; an HTTP POST, if the
client ever fell back, shows in `mock.requests`. Options "event_delay" and "hold" pace
the frames as they pace the SSE routes' events.
"""

from __future__ import annotations

import base64
import hashlib
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import orjson

from forge_record.mock import MockUpstream, Received, hold
from forge_record.mock import openai as http_api

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA
_DEFLATE_TAIL = b"\x00\x00\xff\xff"


@dataclass
class Frame:
    from_client: bool
    opcode: int
    data: bytes  # the message, decompressed
    compressed: bool = False

    def json(self) -> Any:
        return orjson.loads(self.data)


@dataclass
class Connection:
    path: str
    headers: dict[str, str]
    deflate: bool = False
    frames: list[Frame] = field(default_factory=list)
    closed: bool = False
    # response id -> its input + output; `stored` ids (made with "store": true) can be
    # named from other connections too
    contexts: dict[str, list[dict]] = field(default_factory=dict)
    stored: set[str] = field(default_factory=set)

    def client_events(self) -> list[dict]:
        return [f.json() for f in self.frames if f.from_client and f.opcode == TEXT]


# --- what the model answers ----------------------------------------------------------------


def answer(mock: MockUpstream, create: dict, context: list[dict], frame: bytes) -> dict:
    """The response object for a `response.create` whose full input is `context`."""
    request = dict(create, input=context)
    if create.get("generate") is False:  # a warm-up: nothing is generated
        response = http_api.response_object(request, frame, "", [])
        usage = dict(response["usage"], output_tokens=0,
                     total_tokens=response["usage"]["input_tokens"])
        return dict(response, output=[], usage=usage)
    return http_api.response_object(request, frame,
                                    *http_api._responses_answer(mock, request))


def frames(response: dict, warm_up: bool = False) -> Iterator[bytes]:
    """The response's stream events as WebSocket text payloads: the SSE route's `data:`
    payloads, byte for byte. A warm-up gets only the first and the last."""
    for chunk in http_api.response_events(response):
        name, _, data = chunk.partition(b"\ndata: ")
        if warm_up and name not in (b"event: response.created", b"event: response.completed"):
            continue
        yield data.rstrip(b"\n")


def _items(value: Any) -> list[dict]:
    if isinstance(value, str):  # a bare string input is one user message
        return [{"type": "message", "role": "user", "content": value}]
    return list(value or ())


# --- WebSocket: GET /v1/responses, upgraded ----------------------------------------------


def is_upgrade(received: Received) -> bool:
    return received.headers.get("upgrade", "").lower() == "websocket"


def serve(mock: MockUpstream, handler: Any, received: Received) -> None:
    """Take over the handler's connection: handshake, then answer frames until it closes."""
    key = received.headers.get("sec-websocket-key", "").encode()
    offers = received.headers.get("sec-websocket-extensions", "")
    deflate = "permessage-deflate" in offers and mock.options.get("openai_ws_deflate", True)
    handler.close_connection = True
    handler.send_response(101)
    handler.send_header("upgrade", "websocket")
    handler.send_header("connection", "Upgrade")
    handler.send_header("sec-websocket-accept",
                        base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode())
    if deflate:
        handler.send_header("sec-websocket-extensions", "permessage-deflate")
    handler.end_headers()
    conn = Connection(received.path, received.headers, deflate)
    mock.websockets.append(conn)
    _Socket(handler.rfile, handler.wfile, conn).run(mock)


class _Socket:
    def __init__(self, rfile: BinaryIO, wfile: BinaryIO, conn: Connection) -> None:
        self.rfile, self.wfile, self.conn = rfile, wfile, conn
        self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
        self._deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)

    def run(self, mock: MockUpstream) -> None:
        try:
            while (message := self._read_message()) is not None:
                opcode, data = message
                if opcode == TEXT:
                    self._on_text(mock, data)
                elif opcode == PING:
                    self._send(PONG, data)
                elif opcode == CLOSE:
                    self._send(CLOSE, data[:2])
                    break
        except (ConnectionError, OSError):
            pass
        self.conn.closed = True

    def _on_text(self, mock: MockUpstream, data: bytes) -> None:
        event = orjson.loads(data)
        if event.get("type") != "response.create":
            return  # response.processed and the like need no answer
        previous = event.get("previous_response_id")
        earlier = self._earlier(mock, previous) if previous else []
        if earlier is None:
            self._send_json({"type": "error", "status": 400, "error": {
                "type": "invalid_request_error", "code": "previous_response_not_found",
                "message": f"Previous response with id '{previous}' not found.",
                "param": "previous_response_id"}})
            return
        context = earlier + _items(event.get("input"))
        response = answer(mock, event, context, data)
        self.conn.contexts[response["id"]] = context + response["output"]
        if event.get("store"):
            self.conn.stored.add(response["id"])
        delay = mock.options.get("event_delay", 0)  # seconds between frames, as over SSE
        for n, payload in enumerate(frames(response, warm_up=event.get("generate") is False)):
            if delay:
                time.sleep(delay)
            if n == 1:
                hold(mock.options)  # the first frame is out: the call is in flight
            self._send(TEXT, payload)

    def _earlier(self, mock: MockUpstream, response_id: str) -> list[dict] | None:
        """The context a previous response leaves: from this connection, or stored."""
        if response_id in self.conn.contexts:
            return self.conn.contexts[response_id]
        for conn in mock.websockets:
            if response_id in conn.stored:
                return conn.contexts[response_id]
        return None

    # --- framing (RFC 6455, RFC 7692) ----------------------------------------------------

    def _read_message(self) -> tuple[int, bytes] | None:
        """One whole message (fragments joined, inflated), or None at EOF. Control frames
        come back as they arrive, even between fragments."""
        parts: list[bytes] = []
        first_opcode, compressed = 0, False
        while True:
            frame = self._read_frame()
            if frame is None:
                return None
            fin, rsv1, opcode, payload = frame
            if opcode >= CLOSE:
                self.conn.frames.append(Frame(True, opcode, payload))
                return opcode, payload
            if opcode:
                first_opcode, compressed = opcode, rsv1
            parts.append(payload)
            if fin:
                break
        data = b"".join(parts)
        if compressed:
            data = self._inflate.decompress(data + _DEFLATE_TAIL)
        self.conn.frames.append(Frame(True, first_opcode, data, compressed))
        return first_opcode, data

    def _read_frame(self) -> tuple[bool, bool, int, bytes] | None:
        head = self.rfile.read(2)
        if len(head) < 2:
            return None
        length = head[1] & 0x7F
        if length == 126:
            length = int.from_bytes(self.rfile.read(2), "big")
        elif length == 127:
            length = int.from_bytes(self.rfile.read(8), "big")
        mask = self.rfile.read(4) if head[1] & 0x80 else b""
        payload = self.rfile.read(length)
        if mask:
            payload = _unmask(payload, mask)
        return bool(head[0] & 0x80), bool(head[0] & 0x40), head[0] & 0x0F, payload

    def _send_json(self, event: dict) -> None:
        self._send(TEXT, orjson.dumps(event))

    def _send(self, opcode: int, data: bytes) -> None:
        compressed = self.conn.deflate and opcode == TEXT
        self.conn.frames.append(Frame(False, opcode, data, compressed))
        payload = data
        if compressed:
            payload = self._deflate.compress(data) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
            payload = payload.removesuffix(_DEFLATE_TAIL)
        first = 0x80 | (0x40 if compressed else 0) | opcode
        n = len(payload)
        if n < 126:
            head = bytes([first, n])
        elif n < 1 << 16:
            head = bytes([first, 126]) + n.to_bytes(2, "big")
        else:
            head = bytes([first, 127]) + n.to_bytes(8, "big")
        self.wfile.write(head + payload)
        self.wfile.flush()


def _unmask(payload: bytes, mask: bytes) -> bytes:
    # XOR as one big integer: a per-byte Python loop takes milliseconds on Codex's frames
    key = (mask * (len(payload) // 4 + 1))[: len(payload)]
    n = int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")
    return n.to_bytes(len(payload), "big")
