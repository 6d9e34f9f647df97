"""The mitmproxy addon of `forge-record serve`: each call to its session, its upstream.

It sits in front of the recording addons (WebSocketRecorder, then Recorder, as its child), so
its hooks run first on every flow:
- `requestheaders` finds the call's session (forge_record.gateway.keys: path prefix, header
  or token, the token always required) in a worker thread, so the event loop never waits on
  the store. A call without a valid session is answered here (401, 403, 409; 503 while
  draining or with no healthy upstream) and never forwarded. A call with one has its
  `/s/<id>` prefix stripped, its token replaced by the gateway's own upstream key (or
  dropped), its target set to the session's upstream, and the session's sink put on the
  flow (addons.recorder.SINK): from there the recorder records it as in `forge-record run`,
  streamed chunk by chunk, WebSocket frames included. Its call-start hook
  (addons.recorder.STARTED) has the writer process reserve each call's number in the
  session as the call starts (one per HTTP call, one per WebSocket turn), so a call cut off by
  this replica's death leaves a numbered gap (gateway.reservations). No store transaction
  runs in this process per call: its worker threads would take the GIL from the event loop
  while it forwards (docs/BENCHMARKS.md, serve).
- `request` answers the gateway's own endpoints: /healthz, /readyz, /metrics and the
  control API under /api/v1 (forge_record.gateway.api, in a worker thread).
Nothing here raises into mitmproxy: a fault answers the call with a JSON error.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import time
from typing import Any

import orjson
from mitmproxy import http

from forge_record.addons.recorder import SINK, STARTED
from forge_record.errors import StoreError
from forge_record.gateway import api, keys
from forge_record.gateway.metrics import CONTENT_TYPE, Metrics
from forge_record.gateway.reservations import Reservations
from forge_record.gateway.service import Gateway, Refused

log = logging.getLogger("forge_record")

OWN_PATHS = ("/healthz", "/readyz", "/metrics")
HEALTH_EVERY = 5.0  # seconds between upstream health checks
_CONTROL = "forge_record_control"
_FLOWING = "forge_record_flowing"


class GatewayAddon:
    def __init__(self, gateway: Gateway, recording: Any, metrics: Metrics,
                 log_calls: bool = False) -> None:
        self.gateway = gateway
        self.metrics = metrics
        self.log_calls = log_calls  # one JSON line per call on stderr (`serve --log-calls`)
        self.addons = [recording]
        self.inflight = 0  # proxied calls and open WebSockets, for the drain
        self._health: asyncio.Task | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def running(self) -> None:
        self._health = asyncio.get_running_loop().create_task(self._check_upstreams())

    def done(self) -> None:
        if self._health is not None:
            self._health.cancel()

    async def _check_upstreams(self) -> None:
        while True:
            try:
                await self.gateway.upstreams.check()
            except Exception:  # noqa: BLE001 - a check must never end the checking
                log.exception("forge-record: upstream health check failed")
            await asyncio.sleep(HEALTH_EVERY)

    # --- proxied calls ---------------------------------------------------------------------

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        bare = req.path.split("?", 1)[0]
        if bare in OWN_PATHS or bare == api.PREFIX or bare.startswith(api.PREFIX + "/"):
            flow.metadata[_CONTROL] = True
            return
        started = time.monotonic()
        try:
            await self._route(flow)
        except Refused as e:
            self.metrics.refusal(e.status)
            flow.response = _json(e.status, e.body())
        except StoreError as e:
            log.warning("forge-record: cannot find a call's session: %s", e)
            self.metrics.refusal(503)
            flow.response = _json(503, Refused(503, "the store did not answer").body())
        except Exception:  # noqa: BLE001 - a gateway fault must not crash the proxy
            log.exception("forge-record: cannot route %s", req.path)
            flow.response = _json(500, Refused(500, "gateway error").body())
        else:
            self.metrics.resolved(time.monotonic() - started)

    async def _route(self, flow: http.HTTPFlow) -> None:
        gw, req = self.gateway, flow.request
        if gw.draining:
            raise Refused(503, "the gateway is shutting down; retry")
        named = keys.named(req.path, req.headers)
        resolved = gw.cached(named)
        if resolved is None:
            resolved = await gw.run(gw.resolve, named)
        upstream = gw.upstreams.pick(resolved.session_id)
        if upstream is None:
            raise Refused(503, "no upstream is healthy")
        keys.replace_credentials(req.headers, gw.upstream_key)
        req.scheme, req.host, req.port = upstream.scheme, upstream.host, upstream.port
        req.path = upstream.path + named.path
        # Each call the recorders see start on this flow has its number reserved then, by
        # the writer process; its exchange takes that number (gateway.reservations).
        reservations = Reservations(functools.partial(gw.start_call, resolved.session_id,
                                                      resolved.note))
        store_it = gw.sink_for(resolved.session_id, reservations)

        def sink(exchange) -> None:
            self.metrics.call(exchange.dialect, upstream.url, exchange.http_status)
            if self.log_calls:
                _log_call(resolved.session_id, upstream.url, exchange)
            store_it(exchange)

        flow.metadata[SINK] = sink
        flow.metadata[STARTED] = reservations.started
        flow.metadata[_FLOWING] = True
        self._flowing(1)

    def response(self, flow: http.HTTPFlow) -> None:
        upgraded = flow.response is not None and flow.response.status_code == 101
        if flow.metadata.get(_FLOWING) and not upgraded:  # a WebSocket ends at websocket_end
            self._ended(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(_FLOWING):
            self._ended(flow)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(_FLOWING):
            self._ended(flow)

    def _ended(self, flow: http.HTTPFlow) -> None:
        flow.metadata[_FLOWING] = False
        self._flowing(-1)

    def _flowing(self, delta: int) -> None:
        self.inflight += delta
        self.metrics.flowing(delta)

    # --- the gateway's own endpoints ----------------------------------------------------------

    async def request(self, flow: http.HTTPFlow) -> None:
        if not flow.metadata.get(_CONTROL) or flow.response is not None:
            return
        req = flow.request
        path, _, query = req.path.partition("?")
        try:
            if path == "/healthz":
                flow.response = _json(200, {"ok": True})
            elif path == "/readyz":
                ready, why = await self.gateway.run(self._ready)
                flow.response = _json(200 if ready else 503, {"ready": ready, "why": why})
            elif path == "/metrics":
                text = self.metrics.render()
                flow.response = (
                    http.Response.make(200, text, {"content-type": CONTENT_TYPE})
                    if text is not None else
                    _json(501, Refused(501, "install forge-record[serve] for metrics").body()))
            else:
                status, value = await self.gateway.run(
                    api.handle, self.gateway, req.method, path, query, req.headers,
                    req.get_content(strict=False) or b"")
                flow.response = _json(status, value)
        except StoreError as e:
            flow.response = _json(503, Refused(503, str(e)).body())
        except Exception:  # noqa: BLE001 - a control request must not crash the proxy
            log.exception("forge-record: control request %s %s failed", req.method, path)
            flow.response = _json(500, Refused(500, "gateway error").body())

    def _ready(self) -> tuple[bool, str]:
        if self.gateway.draining:
            return False, "draining"
        try:
            self.gateway.store.ping()
        except StoreError as e:
            return False, str(e)
        if not self.gateway.upstreams.any_healthy():
            return False, "no upstream is reachable"
        return True, "ok"


def _log_call(session_id: str, upstream: str, exchange: Any) -> None:
    took = (exchange.ended_at or 0) - exchange.started_at
    line = {"session": session_id, "dialect": exchange.dialect, "url": exchange.url,
            "upstream": upstream, "http_status": exchange.http_status,
            "ms": round(took * 1000, 1), "flags": exchange.flags}
    try:
        sys.stderr.write(orjson.dumps(line).decode() + "\n")
    except (OSError, ValueError):
        pass  # a closed stderr must not cost the call


def _json(status: int, value: Any) -> http.Response:
    return http.Response.make(status, orjson.dumps(value),
                              {"content-type": "application/json"})
