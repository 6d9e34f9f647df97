"""Prometheus metrics of one gateway replica (prometheus-client, the optional `serve` extra).

Without prometheus-client the gateway runs all the same and /metrics answers 501 saying what
to install. Names (all prefixed `forge_record_gateway_`):
- `calls_total{dialect, upstream, code}`: recorded calls, by HTTP status class (2xx, 4xx, ...)
- `refused_total{code}`: calls refused before forwarding (401, 403, 409, 503)
- `inflight`: calls and WebSocket connections being forwarded right now
- `resolve_seconds`: time the gateway adds before forwarding (finding the session)
- `writer_unsettled`: items (calls' starts, exchanges) the writer process has not yet stored
  or spooled
- `writer_backlog`: items waiting for the writer process's pipe
- `lost`: items the store refused (logged); an unreachable store loses none (spooled)
"""

from __future__ import annotations

from collections.abc import Callable

try:
    import prometheus_client as prom
except ImportError:  # pragma: no cover - the `serve` extra is not installed
    prom = None

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    def __init__(self, writer_unsettled: Callable[[], float],
                 writer_backlog: Callable[[], float], lost: Callable[[], float]) -> None:
        self.enabled = prom is not None
        if prom is None:
            return
        self.registry = prom.CollectorRegistry()
        name = "forge_record_gateway_"
        self.calls = prom.Counter(name + "calls", "Recorded calls",
                                  ["dialect", "upstream", "code"], registry=self.registry)
        self.refused = prom.Counter(name + "refused", "Calls refused before forwarding",
                                    ["code"], registry=self.registry)
        self.inflight = prom.Gauge(name + "inflight", "Calls being forwarded",
                                   registry=self.registry)
        self.resolve = prom.Histogram(name + "resolve_seconds",
                                      "Time added before forwarding (finding the session)",
                                      registry=self.registry)
        for metric, help_text, fn in (
            ("writer_unsettled", "Items the writer has not yet stored or spooled",
             writer_unsettled),
            ("writer_backlog", "Items waiting for the writer process's pipe", writer_backlog),
            ("lost", "Items that could not be stored", lost),
        ):
            prom.Gauge(name + metric, help_text, registry=self.registry).set_function(fn)

    def call(self, dialect: str, upstream: str, status: int | None) -> None:
        if self.enabled:
            code = f"{status // 100}xx" if status else "none"
            self.calls.labels(dialect, upstream, code).inc()

    def refusal(self, status: int) -> None:
        if self.enabled:
            self.refused.labels(str(status)).inc()

    def flowing(self, delta: int) -> None:
        if self.enabled:
            self.inflight.inc(delta)

    def resolved(self, seconds: float) -> None:
        if self.enabled:
            self.resolve.observe(seconds)

    def render(self) -> bytes | None:
        return prom.generate_latest(self.registry) if self.enabled else None
