"""Responses over WebSocket, bridged to an engine: the WebSocket half of forge_record.bridge.

No engine speaks WebSocket. With an engine upstream, the agent's upgrade (Codex's built-in
provider: `GET …/responses`, `Upgrade: websocket`) is sent instead to a small WebSocket
endpoint of our own on loopback (`Endpoint`, wsproto on asyncio, started with the first such
upgrade), so mitmproxy relays the socket as it relays any: it negotiates permessage-deflate
with each side, and the WebSocketRecorder records every frame both ways, the agent's exchange
(`response.create` → terminal event) exactly as for the real API. (Answering the upgrade in a
hook with no server behind it does not hold in mitmproxy 12: its WebSocket layer still sends
the agent's pings and close frames to the server, which has no connection.)

The endpoint turns each `response.create` into one streamed Chat Completions call to the
engine over HTTP, made on a thread of its own (`http.client`, so the event loop never waits on
the engine); its chunks come back to the loop, go through the Responses translator
(forge_record.bridge.call, as on HTTP), and each event goes back as one text message. A
warm-up (`"generate": false`) is answered at once, the engine not called; a request that
cannot be bridged, and an engine that fails, get Codex's wrapped error frame (`{"type":
"error", "status": 400, "error": {...}}`).

The engine's call is a second exchange (`openai.chat`, kind "engine"), linked to the agent's
by `bridge:<id>`, queued before the agent's terminal event is sent, so the writer joins the
engine's tokens onto the agent's record (forge_record.bridge.pairs), as for HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from collections.abc import Callable
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from typing import Any
from urllib.parse import urlsplit

import orjson
from mitmproxy import http
from wsproto import ConnectionType, WSConnection
from wsproto import events as ws
from wsproto.extensions import PerMessageDeflate

from forge_record.addons.bridged import BRIDGED, UNTRANSLATABLE
from forge_record.bridge import TRANSLATORS
from forge_record.bridge.call import CHAT_PATH, BridgedCall
from forge_record.bridge.pairs import ENGINE_KIND, link_flag
from forge_record.capture import Capture
from forge_record.decoders import dialect_named
from forge_record.decoders.base import is_event_stream
from forge_record.finalize import flag

log = logging.getLogger("forge_record")

TOKEN_HEADER = "x-forge-record-bridge"  # names the socket to our endpoint
_TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete",
                       "error"})
_READ = 1 << 16
Send = Callable[[dict[str, Any]], None]


class WebSocketBridge:
    """A child addon of the WebSocketRecorder, after the HTTP Recorder: its `request` hook
    runs once the Recorder has pointed the flow at the upstream (the engine)."""

    def __init__(self, ws_recorder: Any) -> None:
        self.ws = ws_recorder
        self.recorder = ws_recorder.recorder
        self.endpoint: Endpoint | None = None
        self._started: asyncio.Future | None = None  # the endpoint's start, awaited by all
        self._sockets: dict[str, _Socket] = {}  # token -> a socket not yet connected

    async def request(self, flow: http.HTTPFlow) -> None:
        sock = self.ws.socket_of(flow)
        if (sock is None or flow.response is not None or not self.recorder.engine
                or sock.dialect not in TRANSLATORS):
            return
        if self.endpoint is None:  # one endpoint, however many upgrades wait for it
            self.endpoint = Endpoint(self)
            self._started = asyncio.ensure_future(self.endpoint.start())
        await asyncio.shield(self._started)
        req = flow.request
        host = (urlsplit(sock.url).hostname or "").lower()
        base = urlsplit(self.recorder.upstreams.get(host, "")).path
        engine_url = (f"{req.scheme}://{req.host}:{req.port}"
                      f"{base.rstrip('/').removesuffix('/v1')}{CHAT_PATH}")
        token = secrets.token_hex(8)
        self._sockets[token] = _Socket(flow, engine_url, _engine_headers(req.headers))
        req.scheme, req.host, req.port = "http", "127.0.0.1", self.endpoint.port
        req.headers[TOKEN_HEADER] = token

    def done(self) -> None:
        if self.endpoint is not None:
            self.endpoint.stop()

    def claim(self, token: str) -> _Socket | None:
        return self._sockets.pop(token, None)

    # --- one call per response.create ----------------------------------------------------

    def create(self, state: _Socket, create: dict[str, Any], send: Send) -> None:
        if state.call is not None:
            state.call.cancelled.set()  # superseded, as the recorder records it
        sock = self.ws.socket_of(state.flow)
        agent = sock.capture if sock is not None else None
        request = {k: v for k, v in create.items() if k != "type"}
        request["stream"] = True  # a WebSocket answer is always a stream of events
        call = BridgedCall.open(TRANSLATORS[sock.dialect], orjson.dumps(request),
                                path=sock.path, model=self.recorder.engine_model,
                                top_logprobs=self.recorder.top_logprobs)
        notes = [BRIDGED, *getattr(call.translator, "flags", ())]
        if agent is not None:  # not our loopback endpoint: the engine is the upstream
            agent.exchange.upstream_url = state.engine_url
        if call.refused is not None:
            self.recorder.untranslatable += 1
            log.warning("forge-record: cannot bridge %s: %s", sock.url, call.refused)
            _note(agent, [*notes, UNTRANSLATABLE])
            send(_wrapped(400, call.translator.error(400, call.refused)["error"]))
            return
        warm_up = getattr(call.translator, "warm_up", None)
        if request.get("generate") is False and warm_up is not None:
            _note(agent, notes)
            for event in warm_up():
                send(event)
            return
        link = secrets.token_hex(6)
        _note(agent, [*notes, link_flag(link)])
        engine = Capture(dialect_named("openai.chat"), seq=next(self.recorder._seq),
                         method="POST", url=state.engine_url, upstream_url=state.engine_url,
                         path=urlsplit(state.engine_url).path, headers=state.headers,
                         body=call.request_body, max_body=self.recorder.max_body)
        engine.exchange.kind = ENGINE_KIND
        flag(engine.exchange, link_flag(link))
        queue = lambda exchange: self.recorder._queue(state.flow, exchange)  # noqa: E731
        state.call = _EngineCall(state, call, agent, engine, queue, send)
        state.call.start(asyncio.get_running_loop())


class _Socket:
    """A bridged WebSocket: its flow, where its calls go, and the call running, if any."""

    def __init__(self, flow: http.HTTPFlow, engine_url: str,
                 headers: list[tuple[str, str]]) -> None:
        self.flow = flow
        self.engine_url = engine_url
        self.headers = headers
        self.call: _EngineCall | None = None
        self.closed = False


class Endpoint:
    """Our WebSocket endpoint on loopback: the handshake (permessage-deflate when offered),
    pings, close, and each text message handed to the bridge."""

    def __init__(self, bridge: WebSocketBridge) -> None:
        self.bridge = bridge
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = WSConnection(ConnectionType.SERVER)
        state: _Socket | None = None
        text: list[str] = []

        def send(event: dict[str, Any]) -> None:
            if not writer.is_closing():
                writer.write(conn.send(ws.TextMessage(data=orjson.dumps(event).decode())))

        try:
            while data := await reader.read(_READ):
                conn.receive_data(data)
                for event in conn.events():
                    if isinstance(event, ws.Request):
                        state = self._accept(conn, writer, event)
                    elif isinstance(event, ws.TextMessage) and state is not None:
                        text.append(event.data)
                        if event.message_finished:
                            self._message("".join(text), state, send)
                            text = []
                    elif isinstance(event, ws.Ping):
                        writer.write(conn.send(event.response()))
                    elif isinstance(event, ws.CloseConnection):
                        writer.write(conn.send(event.response()))
                        return
        except (ConnectionError, OSError) as e:
            log.debug("forge-record: bridge socket ended: %s", e)
        finally:
            if state is not None:
                state.closed = True
                if state.call is not None:
                    state.call.cancelled.set()
            writer.close()

    def _accept(self, conn: WSConnection, writer: asyncio.StreamWriter,
                event: ws.Request) -> _Socket | None:
        headers = {k.decode().lower(): v.decode() for k, v in event.extra_headers}
        state = self.bridge.claim(headers.get(TOKEN_HEADER, ""))
        if state is None:  # not a socket of ours
            writer.write(conn.send(ws.RejectConnection(status_code=404)))
            return None
        writer.write(conn.send(ws.AcceptConnection(extensions=[PerMessageDeflate()])))
        return state

    def _message(self, data: str, state: _Socket, send: Send) -> None:
        try:
            create = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(create, dict) or create.get("type") != "response.create":
            return  # response.processed and the like need no answer
        try:
            self.bridge.create(state, create, send)
        except Exception:  # noqa: BLE001 - the agent gets an error, never a hang
            log.exception("forge-record: cannot bridge a WebSocket call")
            send(_wrapped(500, {"type": "server_error", "code": None, "param": None,
                                "message": "the recorder could not bridge this call"}))


class _EngineCall:
    """One engine call: the HTTP request on a thread, its answer translated on the loop."""

    def __init__(self, state: _Socket, call: BridgedCall, agent: Capture | None,
                 engine: Capture, queue: Callable[[Any], None], send: Send) -> None:
        self.state = state
        self.send = send
        self.call = call
        self.agent = agent
        self.engine = engine
        self.queue = queue
        self.cancelled = threading.Event()
        self._held: list[dict[str, Any]] = []  # the terminal event on: sent once recorded
        self._started = False
        self._ended = False  # a terminal event went to the agent

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        threading.Thread(target=self._fetch, args=(loop,), daemon=True,
                         name="forge-record engine call").start()

    # --- on the thread -----------------------------------------------------------------

    def _fetch(self, loop: asyncio.AbstractEventLoop) -> None:
        url = urlsplit(self.state.engine_url)
        kind = HTTPSConnection if url.scheme == "https" else HTTPConnection
        conn = kind(url.hostname or "127.0.0.1", url.port, timeout=600)
        error = None
        try:
            conn.request("POST", url.path, self.call.request_body, dict(self.state.headers))
            resp = conn.getresponse()
            _soon(loop, self._on_start, resp.status, resp.getheaders())
            while not self.cancelled.is_set() and (data := resp.read1(_READ)):
                _soon(loop, self._on_chunk, data)
            if self.cancelled.is_set():
                error = "cancelled: the agent's call ended"
        except (OSError, HTTPException) as e:
            error = f"{type(e).__name__}: {e}"
        finally:
            conn.close()
        _soon(loop, self._on_end, error)

    # --- on the loop -------------------------------------------------------------------

    def _on_start(self, status: int, headers: list[tuple[str, str]]) -> None:
        found = {k.lower(): v for k, v in headers}
        content_type = found.get("content-type", "")
        encoding = found.get("content-encoding", "")
        self.engine.response_started(status, headers, content_type, encoding)
        self.call.start(status, encoding, is_event_stream(content_type))
        self._started = True

    def _on_chunk(self, data: bytes) -> None:
        self.engine.tee(data)
        self._send(self.call.events(data))

    def _on_end(self, error: str | None) -> None:
        events: list[dict[str, Any]] = []
        if self._started and self.call.streaming:
            events = self.call.final_events()
        elif self._started:
            answer = self.call.answer()
            events = [_wrapped(self.call.status, answer["error"]) if "error" in answer else
                      {"type": "response.completed", "response": answer}]
        self.queue(self.engine.finish(error, upstream_failed=error is not None))
        if self.call.faults:
            _note(self.agent, ["bridge_error"])
        self._send(events, last=True)
        if error is not None and not self._ended:
            self._send([_wrapped(502, {"type": "server_error", "code": None, "param": None,
                                       "message": f"the engine call failed: {error}"})],
                       last=True)
        if self.state.call is self:
            self.state.call = None

    def _send(self, events: list[dict[str, Any]], last: bool = False) -> None:
        """Events to the agent; from the terminal one on, held until the engine's record
        is queued (the writer must see it before the agent's)."""
        for event in events:
            if self._held or event.get("type") in _TERMINAL:
                self._held.append(event)
            elif not self.state.closed:
                self.send(event)
        if last and self._held and not self.state.closed:
            for event in self._held:
                self.send(event)
            self._ended, self._held = True, []


def _soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the proxy stopped: nobody is left to tell
        pass


def _wrapped(status: int, error: dict[str, Any]) -> dict[str, Any]:
    """Codex's WebSocket error frame."""
    return {"type": "error", "status": status, "error": error}


def _note(capture: Capture | None, flags: list[str]) -> None:
    if capture is not None:
        for name in flags:
            flag(capture.exchange, name)


def _engine_headers(headers: http.Headers) -> list[tuple[str, str]]:
    """The engine call's headers: the agent's credential, and what a chat stream needs."""
    out = [("content-type", "application/json"), ("accept", "text/event-stream"),
           ("accept-encoding", "identity")]
    if headers.get("authorization"):
        out.append(("authorization", headers["authorization"]))
    return out
