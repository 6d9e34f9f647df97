"""The mitmproxy addon that records model calls.

Per flow: `request` decides whether the call is one to record (a known dialect's path, on a
model host, or on any host when its body speaks that dialect too) and, for hosts given an
upstream, sends it there instead; `responseheaders` sets `flow.response.stream` to the
capture's tee, so every response, streamed or not, passes through chunk by chunk, unchanged;
`response` and `error` end the capture and hand the exchange to the sink (the store writer's
queue). Traffic that is not recorded still streams through untouched. In regular (forward)
mode only model hosts are TLS-intercepted; every other host is tunnelled as is.

With `engine` set (the model server is vLLM or SGLang), a Chat Completions, Completions or
SGLang `/generate` call asks it for its token ids and logprobs, and the answer is passed on
with what the agent did not ask for taken out again (forge_record.engine): the one case
where the agent's bytes are edited, so that the record holds the tokens the policy sampled
while the agent sees what it asked for.

With `engine` set, a call in a dialect the bridge translates (forge_record.bridge: Anthropic
Messages, ...) is sent to the engine as a Chat Completions call, and the engine's answer goes
back translated, chunk by chunk (addons/bridged.py). Such a call is recorded twice: as the
agent made it and as the engine answered it.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from mitmproxy import http, tls

from forge_record import engine as engines
from forge_record.addons import bridged
from forge_record.addons.failures import upstream_failed
from forge_record.capture import DEFAULT_MAX_BODY, Capture
from forge_record.decoders import Dialect, dialect_for
from forge_record.decoders.base import is_event_stream
from forge_record.records import Exchange

log = logging.getLogger("forge_record")

_META = "forge_record"
_ASKED = "forge_record.asked"  # what the agent asked for, of the token fields we add
# A flow's own sink, if another addon set one before `response` (forge-record serve: the
# exchange goes to the session that flow belongs to); otherwise the Recorder's.
SINK = "forge_record_sink"
# A flow's call-start hook, if another addon set one: called on the event loop, without
# arguments, once per call the flow carries, as the call starts (before it is forwarded), so
# that each exchange later handed to the flow's sink has had its start announced, in order
# (forge-record serve reserves the call's number in its session there). An extra record of
# a call (a bridged call's engine record) is announced by nothing.
STARTED = "forge_record_started"


class Recorder:
    def __init__(
        self,
        sink: Callable[[Exchange], None],
        *,
        model_hosts: Iterable[str] = (),
        upstreams: dict[str, str] | None = None,
        record_any_host: bool = False,
        max_body: int = DEFAULT_MAX_BODY,
        engine: str | None = None,
        top_logprobs: int = 0,
        engine_model: str | None = None,
        engine_params: dict | None = None,
    ) -> None:
        """`model_hosts`: hosts whose traffic is intercepted and may be recorded.
        `upstreams`: host -> base URL to send that host's requests to instead.
        `record_any_host`: record every host (reverse mode, where only model traffic comes).
        `engine`: the model server is this engine ("vllm", "sglang"): ask it for token ids,
        and for `top_logprobs` alternatives per token; bridged calls name `engine_model` as
        their model (None: the agent's) and set `engine_params` (sampling settings pinned
        by the trainer) over what the agent asked."""
        self.sink = sink
        self.upstreams = {h.lower(): u.rstrip("/") for h, u in (upstreams or {}).items()}
        self.model_hosts = {h.lower() for h in model_hosts} | set(self.upstreams)
        self.record_any_host = record_any_host
        self.max_body = max_body  # bytes kept per body; the agent always gets all of it
        self.engine = engine
        self.top_logprobs = top_logprobs
        self.engine_model = engine_model
        self.engine_params = dict(engine_params or {})
        self._seq = itertools.count(1)
        self.recorded = 0
        self.untranslatable = 0  # bridged calls refused with a 400: the engine cannot say them

    # --- forward mode: intercept only model hosts ------------------------------------------

    def tls_clienthello(self, data: tls.ClientHelloData) -> None:
        if not self.intercepts((data.client_hello.sni or "").lower()):
            data.ignore_connection = True

    def intercepts(self, host: str) -> bool:
        """Whether calls to `host` are recorded whatever their body says (the WebSocket
        addon asks too)."""
        return self.record_any_host or host in self.model_hosts

    # --- recording ------------------------------------------------------------------------

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None:
            return  # answered by the proxy itself (a client refused by addons/access.py)
        req = flow.request
        # What the agent asked for, before any redirect to an upstream (which rewrites the
        # Host header too): routing reads it, the record keeps it.
        logical_url, path, host = req.pretty_url, req.path, req.pretty_host.lower()
        dialect = dialect_for(req.method, path)
        headers = list(req.headers.items(multi=True)) if dialect is not None else []
        self._redirect(flow, host)
        if dialect is None:
            return
        body = req.get_content(strict=False) or b""
        if not (self.intercepts(host) or _speaks(dialect, body)):
            return
        call_started(flow.metadata.get(STARTED))
        if self.engine and bridged.bridges(dialect, path):
            self._bridge(flow, dialect, body, logical_url, path, headers, host)
            return
        if self.engine and dialect.name in engines.DIALECTS:
            body = self._ask_for_tokens(flow, body, dialect.name)
        flow.metadata[_META] = Capture(
            dialect,
            seq=next(self._seq),
            method=req.method,
            url=logical_url,
            upstream_url=req.url,  # where it is sent
            path=path,
            headers=headers,
            body=body,
            max_body=self.max_body,
        )

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        capture: Capture | None = flow.metadata.get(_META)
        resp = flow.response
        assert resp is not None
        call: bridged.Bridged | None = flow.metadata.get(bridged.META)
        if call is not None:
            call.response_headers(resp)
            return
        if capture is None:
            resp.stream = True  # not ours: pass through without buffering
            return
        if capture.exchange.http_status is not None:  # answered by the bridge itself
            return
        capture.response_started(
            resp.status_code,
            list(resp.headers.items(multi=True)),
            resp.headers.get("content-type", ""),
            resp.headers.get("content-encoding", ""),
        )
        asked = flow.metadata.get(_ASKED)
        resp.stream = capture.tee if asked is None else _stripped(capture, resp, *asked)

    def response(self, flow: http.HTTPFlow) -> None:
        self._finish(flow, None)

    def error(self, flow: http.HTTPFlow) -> None:
        # The cause is kept; an upstream that failed (refused, reset, a body cut short) makes
        # the exchange an error or incomplete, never complete (Capture.finish).
        self._finish(flow, flow.error.msg if flow.error else "error", upstream_failed(flow))

    def _finish(self, flow: http.HTTPFlow, error: str | None, upstream: bool = False) -> None:
        call: bridged.Bridged | None = flow.metadata.pop(bridged.META, None)
        engine = call.finish_engine(error, upstream) if call is not None else None
        if engine is not None:  # the engine's exchange first: the agent's takes its tokens
            self._queue(flow, engine)
        capture: Capture | None = flow.metadata.get(_META)
        if capture is None or capture.finished:
            return
        if capture.exchange.http_status is None and flow.response is not None:
            # the response arrived whole (no responseheaders stream was set up)
            capture.response_started(
                flow.response.status_code,
                list(flow.response.headers.items(multi=True)),
                flow.response.headers.get("content-type", ""),
                "",
            )
            capture.tee(flow.response.get_content(strict=False) or b"")
        self._queue(flow, capture.finish(error, upstream_failed=upstream))

    def _queue(self, flow: http.HTTPFlow, exchange: Exchange) -> None:
        self.recorded += 1
        try:
            flow.metadata.get(SINK, self.sink)(exchange)
        except Exception:  # noqa: BLE001 - recording must never break the agent's call
            log.exception("forge-record: could not queue exchange %s", exchange.url)

    def _bridge(self, flow: http.HTTPFlow, dialect: Dialect, body: bytes, url: str, path: str,
                headers: list[tuple[str, str]], host: str) -> None:
        """Send the agent's call to the engine as Chat Completions (bridged.open), or answer
        it with its dialect's 400 when it cannot be (counted in `untranslatable`)."""
        capture = Capture(dialect, seq=next(self._seq), method=flow.request.method, url=url,
                          upstream_url=flow.request.url, path=path, headers=headers, body=body,
                          max_body=self.max_body)
        flow.metadata[_META] = capture
        try:
            call = bridged.bridge_call(flow, capture, body, path, self._base_path(host),
                                model=self.engine_model, top_logprobs=self.top_logprobs,
                                seq=next(self._seq), params=self.engine_params)
        except Exception:  # noqa: BLE001 - a bridge fault answers the agent, never hangs it
            log.exception("forge-record: cannot bridge %s", url)
            call = None
            bridged.refuse(flow, capture, 500, "the recorder could not translate this request")
        if call is None and bridged.UNTRANSLATABLE in capture.exchange.flags:
            self.untranslatable += 1
        elif call is not None:
            flow.metadata[bridged.META] = call

    def _base_path(self, host: str) -> str:
        """The path the engine's routes start under: its upstream's, if one was given."""
        target = self.upstreams.get(host)
        return urlsplit(target).path if target is not None else ""

    def _ask_for_tokens(self, flow: http.HTTPFlow, body: bytes, dialect: str) -> bytes:
        """The body sent to the engine, and recorded: what the agent sent, asking for token
        ids and logprobs too."""
        if flow.request.headers.get("content-encoding"):
            return body  # an encoded request body is sent on as it is
        asking = engines.ask_for_tokens(body, self.top_logprobs, dialect)
        if asking is None:
            return body
        flow.request.content, asked = asking  # Content-Length follows
        flow.metadata[_ASKED] = (asked, dialect)
        return asking[0]

    def _redirect(self, flow: http.HTTPFlow, host: str) -> None:
        target = self.upstreams.get(host)
        if target is None:
            return
        url = urlsplit(target)
        req = flow.request
        req.scheme = url.scheme
        req.host = url.hostname or host
        req.port = url.port or (443 if url.scheme == "https" else 80)
        req.path = url.path + req.path


def call_started(hook: Callable[[], None] | None) -> None:
    """Announce a call's start to the flow's STARTED hook, if it has one."""
    if hook is None:
        return
    try:
        hook()
    except Exception:  # noqa: BLE001 - recording must never break the agent's call
        log.exception("forge-record: a call-start hook failed")


def _stripped(capture: Capture, resp: http.Response, asked: engines.Asked, dialect: str):
    """The stream callable for an engine's answer: the capture keeps the engine's bytes, the
    agent gets them less what it did not ask for. An encoded body cannot be edited as it
    flows, so the agent then gets the engine's fields as they are."""
    if resp.headers.get("content-encoding"):
        return capture.tee
    strip = engines.Strip(asked, is_event_stream(resp.headers.get("content-type", "")), dialect)
    if "content-length" in resp.headers:  # the edited body's length is known only at its end
        del resp.headers["content-length"]
        if resp.http_version == "HTTP/1.1":
            resp.headers["transfer-encoding"] = "chunked"

    def stream(chunk: bytes) -> list[bytes]:
        capture.tee(chunk)
        # A list, never b"": an empty chunk would end an HTTP/1.1 chunked body early.
        return strip.feed(chunk) if chunk else strip.flush()

    return stream


def _speaks(dialect: Dialect, body: bytes) -> bool:
    """Whether a body on a host we do not know is this dialect's: a JSON object that names the
    dialect's key field. Only plain-HTTP traffic can get here (a local or LAN model server
    reached through HTTP_PROXY): TLS is intercepted for model hosts alone."""
    return body[:64].lstrip()[:1] == b"{" and any(key in body for key in dialect.body_keys)
