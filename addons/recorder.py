"""The mitmproxy addon that records model calls.

Per flow: `request` decides whether the call is one to record (a known dialect's path, on a
model host, or on any host when its body speaks that dialect too) and, for hosts given an
upstream, sends it there instead; `responseheaders` sets `flow.response.stream` to the
capture's tee, so every response, streamed or not, passes through chunk by chunk, unchanged;
`response` and `error` end the capture and hand the exchange to the sink (the store writer's
queue). Traffic that is not recorded still streams through untouched. In regular (forward)
mode only model hosts are TLS-intercepted; every other host is tunnelled as is.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from mitmproxy import http, tls

from forge_record.capture import DEFAULT_MAX_BODY, Capture
from forge_record.decoders import dialect_for
from forge_record.records import Exchange

log = logging.getLogger("forge_record")

_META = "forge_record"
# A flow's own sink, if another addon set one before `response` (forge-record serve: the
# exchange goes to the session that flow belongs to); otherwise the Recorder's.
SINK = "forge_record_sink"


class Recorder:
    def __init__(
        self,
        sink: Callable[[Exchange], None],
        *,
        model_hosts: Iterable[str] = (),
        upstreams: dict[str, str] | None = None,
        record_any_host: bool = False,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        """`model_hosts`: hosts whose traffic is intercepted and may be recorded.
        `upstreams`: host -> base URL to send that host's requests to instead.
        `record_any_host`: record every host (reverse mode, where only model traffic comes)."""
        self.sink = sink
        self.upstreams = {h.lower(): u.rstrip("/") for h, u in (upstreams or {}).items()}
        self.model_hosts = {h.lower() for h in model_hosts} | set(self.upstreams)
        self.record_any_host = record_any_host
        self.max_body = max_body  # bytes kept per body; the agent always gets all of it
        self._seq = itertools.count(1)
        self.recorded = 0

    # --- forward mode: intercept only model hosts ------------------------------------------

    def tls_clienthello(self, data: tls.ClientHelloData) -> None:
        host = (data.client_hello.sni or "").lower()
        if not self.record_any_host and host not in self.model_hosts:
            data.ignore_connection = True

    # --- recording ------------------------------------------------------------------------

    def request(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        # What the agent asked for, before any redirect to an upstream.
        logical_url, path, host = req.pretty_url, req.path, req.pretty_host.lower()
        self._redirect(flow, host)
        dialect = dialect_for(req.method, path)
        if dialect is None:
            return
        body = req.get_content(strict=False) or b""
        if not (self.record_any_host or host in self.model_hosts or _speaks(dialect, body)):
            return
        flow.metadata[_META] = Capture(
            dialect,
            seq=next(self._seq),
            method=req.method,
            url=logical_url,
            path=path,
            headers=list(req.headers.items(multi=True)),
            body=body,
            max_body=self.max_body,
        )

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        capture: Capture | None = flow.metadata.get(_META)
        resp = flow.response
        assert resp is not None
        if capture is None:
            resp.stream = True  # not ours: pass through without buffering
            return
        capture.response_started(
            resp.status_code,
            list(resp.headers.items(multi=True)),
            resp.headers.get("content-type", ""),
            resp.headers.get("content-encoding", ""),
        )
        resp.stream = capture.tee

    def response(self, flow: http.HTTPFlow) -> None:
        self._finish(flow, None)

    def error(self, flow: http.HTTPFlow) -> None:
        self._finish(flow, flow.error.msg if flow.error else "error")

    def _finish(self, flow: http.HTTPFlow, error: str | None) -> None:
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
        exchange = capture.finish(error)
        self.recorded += 1
        try:
            flow.metadata.get(SINK, self.sink)(exchange)
        except Exception:  # noqa: BLE001 - recording must never break the agent's call
            log.exception("forge-record: could not queue exchange %s", exchange.url)

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


def _speaks(dialect, body: bytes) -> bool:
    """Whether a body on a host we do not know is this dialect's: a JSON object that names the
    dialect's key field. Only plain-HTTP traffic can get here (a local or LAN model server
    reached through HTTP_PROXY): TLS is intercepted for model hosts alone."""
    keys = getattr(dialect, "body_keys", (b'"model"',))
    return body[:64].lstrip()[:1] == b"{" and any(key in body for key in keys)
