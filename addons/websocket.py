"""The mitmproxy addon that records the Responses API over WebSocket (Codex's built-in
provider: `GET …/responses` upgraded, `OpenAI-Beta: responses_websockets=…`).

mitmproxy negotiates permessage-deflate with each side on its own and hands the hooks every
message whole and decompressed; this addon only reads them. It never changes, drops or
holds back a frame, so the agent and the API see what they would see without it.

One exchange per call: a client `response.create` opens it, the next terminal server event
(`response.completed`, `.failed`, `.incomplete`, or an `error` frame) closes it. A new
`response.create` while one is open, or the end of the connection, closes the open one as
incomplete (`aborted:<why>`). Frames between calls (`codex.rate_limits`, …) belong to no
exchange. Each exchange goes through the same `Capture` as an HTTP call: the upgrade's URL
(scheme `ws`/`wss`, as the agent asked for it, before any `--upstream` redirect) and headers,
the `response.create` frame as the raw request, each server frame teed as one JSON line into
a `ResponsesFold`; status and flags follow Capture's rules, and the exchange goes to the
HTTP recorder's sink with the next number of its sequence.

On the event loop this costs one JSON parse per server frame (as for SSE) and a prefix check
per client frame. Parsing the request, rebuilding its full context from
`previous_response_id` and marking warm-ups as side calls happen later, in the writer thread
(`forge_record.chain`).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
from mitmproxy import http

from forge_record.addons.bridged_ws import WebSocketBridge
from forge_record.addons.recorder import SINK, STARTED, Recorder, call_started
from forge_record.capture import Capture
from forge_record.decoders import dialect_for
from forge_record.decoders.openai_responses import ResponsesFold
from forge_record.records import Response

log = logging.getLogger("forge_record")

_META = "forge_record_ws"
# Events after which the server sends nothing more for this call.
ENDING = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})
_CREATE = b'{"type":"response.create"'


class WebSocketRecorder:
    """Records Responses calls made over WebSocket. `recorder` records the HTTP calls; it is
    loaded as this addon's child, so `InProcessProxy(WebSocketRecorder(recorder))` runs both,
    sharing one sink, one set of model hosts and one sequence of exchange numbers. With an
    engine upstream, `WebSocketBridge` (a child after the recorder) answers the calls."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.addons = [recorder, WebSocketBridge(self)]
        self._sockets: dict[int, _Socket] = {}  # open connections, by id(flow)

    def socket_of(self, flow: http.HTTPFlow) -> _Socket | None:
        """The recorded connection `flow` is, if it is one."""
        return flow.metadata.get(_META)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        # Runs before any addon's `request` hook, so the URL is still the one the agent
        # asked for (the HTTP recorder may redirect it to an --upstream).
        req = flow.request
        if req.headers.get("upgrade", "").lower() != "websocket":
            return
        dialect = dialect_for(req.method, req.path, websocket=True)  # the HTTP addon's rules
        if dialect is not None and self.recorder.intercepts(req.pretty_host.lower()):
            flow.metadata[_META] = _Socket(dialect.name, _ws_url(req.pretty_url), req.path,
                                           list(req.headers.items(multi=True)))

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        sock: _Socket | None = flow.metadata.get(_META)
        if sock is not None and flow.response is not None:
            sock.upstream_url = _ws_url(flow.request.url)  # after any --upstream redirect
            sock.response_headers = list(flow.response.headers.items(multi=True))
            sock.sink = flow.metadata.get(SINK, self.recorder.sink)
            sock.started = flow.metadata.get(STARTED)
            self._sockets[id(flow)] = sock

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        sock: _Socket | None = flow.metadata.get(_META)
        if sock is None or flow.websocket is None:
            return
        message = flow.websocket.messages[-1]
        try:
            if message.from_client:
                self._from_client(sock, message.content, message.is_text)
            else:
                self._from_server(sock, message.content, message.is_text)
        except Exception:  # noqa: BLE001 - recording must never break the agent's call
            log.exception("forge-record: cannot record a WebSocket frame on %s", sock.url)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        sock = self._sockets.pop(id(flow), None)
        if sock is not None and sock.capture is not None:
            ws = flow.websocket
            code = ws.close_code if ws is not None else None
            self._end(sock, f"connection closed ({code})" if code else "connection closed")

    def done(self) -> None:
        """The proxy is stopping: whatever is still open is recorded as it stands."""
        for sock in self._sockets.values():
            if sock.capture is not None:
                self._end(sock, "proxy stopped")
        self._sockets.clear()

    # --- one exchange per response.create ---------------------------------------------------

    def _from_client(self, sock: _Socket, data: bytes, is_text: bool) -> None:
        if not is_text or not _is_create(data):
            return  # response.processed and the like: not a call
        if sock.capture is not None:
            self._end(sock, "superseded by a new response.create")
        call_started(sock.started)  # a turn is the call: one per response.create
        sock.frames = _FrameDialect(sock.dialect)
        sock.capture = Capture(sock.frames, seq=next(self.recorder._seq), method="GET",
                               url=sock.url, upstream_url=sock.upstream_url, path=sock.path,
                               headers=sock.request_headers,
                               body=data, max_body=self.recorder.max_body, decode_live=True)
        sock.capture.exchange.http_status = 101  # the call went over an upgraded connection

    def _from_server(self, sock: _Socket, data: bytes, is_text: bool) -> None:
        capture = sock.capture
        if capture is None:
            return  # between calls: no exchange owns it
        if capture.exchange.first_byte_at is None:
            capture.response_started(101, sock.response_headers, "application/json", "")
        if not is_text:
            if "binary_frame" not in capture.exchange.flags:
                capture.exchange.flags.append("binary_frame")
            return
        decoder = sock.frames.decoder if sock.frames is not None else None
        seen = decoder.frames if decoder is not None else 0
        capture.tee(data + b"\n")  # one JSON line per frame in the raw response
        if decoder is None:
            return
        if decoder.frames == seen:  # past the size cap the capture keeps nothing more,
            decoder.watch(data)  # but the call must still end at its terminal event
        if decoder.ended:
            self._end(sock, None)

    def _end(self, sock: _Socket, error: str | None) -> None:
        capture, sock.capture, sock.frames = sock.capture, None, None
        assert capture is not None
        exchange = capture.finish(error)
        try:
            (sock.sink or self.recorder.sink)(exchange)
        except Exception:  # noqa: BLE001 - recording must never break the agent's call
            log.exception("forge-record: could not queue exchange %s", exchange.url)


class _Socket:
    """One recorded WebSocket connection and the exchange open on it, if any."""

    def __init__(self, dialect: str, url: str, path: str,
                 request_headers: list[tuple[str, str]]) -> None:
        self.dialect = dialect
        self.url = url
        self.upstream_url: str | None = None
        self.path = path
        self.request_headers = request_headers
        self.response_headers: list[tuple[str, str]] = []
        self.capture: Capture | None = None
        self.sink = None  # the flow's own sink (see recorder.SINK), set once it is open
        self.started = None  # the flow's own call-start hook (recorder.STARTED), likewise
        self.frames: _FrameDialect | None = None


class _FrameDecoder:
    """Capture's decoder for one call: each `feed` is one server frame (plus a newline),
    parsed and folded. It never raises: a frame that is not JSON is kept as undecoded."""

    def __init__(self) -> None:
        self.fold = ResponsesFold()
        self.frames = 0  # frames fed
        self.ended = False  # a terminal event was seen, fed or only watched

    @property
    def complete(self) -> bool:
        return self.fold.complete

    def feed(self, chunk: bytes) -> None:
        self.frames += 1
        self.fold.apply(self.watch(chunk))

    def watch(self, frame: bytes) -> Any:
        """The frame parsed (a non-JSON frame as {"data": text}), noting whether it ends
        the call."""
        try:
            event = orjson.loads(frame)
        except orjson.JSONDecodeError:
            return {"data": frame.decode("utf-8", "replace")}
        if isinstance(event, dict) and event.get("type") in ENDING:
            self.ended = True
        return event

    def finish(self) -> Response:
        return self.fold.finish()


class _FrameDialect:
    """What Capture needs of a dialect, for one WebSocket call. The exchange is stored under
    the dialect that owns the upgrade's path (`openai.responses`, the one dialect with
    WebSocket routes), so the writer parses its `response.create` frame as that dialect's
    request body."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.decoder = _FrameDecoder()

    def kind(self, path: str) -> str:
        return "model"  # warm-ups become "side" once their frame is parsed (chain.py)

    def response_decoder(self, content_type: str) -> _FrameDecoder:
        return self.decoder


def _is_create(data: bytes) -> bool:
    if data.startswith(_CREATE):  # Codex and the SDKs put "type" first: no parse needed
        return True
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(event, dict) and event.get("type") == "response.create"


def _ws_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme={"https": "wss", "http": "ws"}.get(parts.scheme,
                                                                                parts.scheme)))
