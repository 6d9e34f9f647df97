"""How each recorded call went, in words a person at the terminal reads.

Two readers, one vocabulary:

- `failure(exchange)`: why a call failed, as a short cause that many calls can share
  ("api.anthropic.com unreachable", "HTTP 529 from api.anthropic.com"), or None when the
  model API answered. It reads only what the proxy knows without parsing (the HTTP status and
  the `aborted:` flag), so `Failures` can count on the proxy's event loop: one dict update.
- `describe(exchange)`: one line per exchange for `run -v` (status, dialect, model, tokens,
  time), from the finalized record, so it is written by the store writer process, which has
  folded the response anyway.

The closing line of `forge-record run` says `Failures.summary()`: "11 calls failed:
api.anthropic.com unreachable", so a run with no network does not read like a run that
recorded 11 model calls.
"""

from __future__ import annotations

import logging
from collections import Counter
from urllib.parse import urlsplit

from forge_record.records import COMPLETE, ERROR, Exchange

log = logging.getLogger("forge_record")

_ABORTED = "aborted:"


def host_of(exchange: Exchange) -> str:
    """The host the agent called (the logical URL, before any --upstream redirect)."""
    return urlsplit(exchange.url).hostname or exchange.url or "the model API"


def failure(exchange: Exchange) -> str | None:
    """The cause of a failed call, or None if the model API answered below 400."""
    if exchange.http_status is None:  # no response at all: the connection failed
        return f"{host_of(exchange)} unreachable"
    if "untranslatable" in exchange.flags:  # refused by the dialect bridge, never sent
        return "untranslatable for the engine"
    if exchange.http_status >= 400:
        return f"HTTP {exchange.http_status} from {host_of(exchange)}"
    return None


def error_detail(exchange: Exchange) -> str | None:
    """What went wrong as the proxy or the API said it: the connection error, or the API's
    error message."""
    aborted = next((f.removeprefix(_ABORTED) for f in exchange.flags if f.startswith(_ABORTED)),
                   None)
    error = exchange.response.error if exchange.response is not None else None
    if error:
        return str(error.get("message") or error.get("type") or error)
    return aborted


class Failures:
    """Failed calls counted by cause, in the order the causes first appeared."""

    def __init__(self) -> None:
        self.causes: Counter[str] = Counter()

    def __call__(self, exchange: Exchange) -> None:
        if exchange.kind == "engine":  # a bridged call's engine side: its agent's record counts
            return
        cause = failure(exchange)
        if cause is not None:
            self.causes[cause] += 1

    @property
    def total(self) -> int:
        return sum(self.causes.values())

    def summary(self) -> str | None:
        """E.g. "11 calls failed: api.anthropic.com unreachable"; None when none failed."""
        if not self.total:
            return None
        causes = ", ".join(c if len(self.causes) == 1 else f"{c} ({n})"
                           for c, n in self.causes.items())
        return f"{count(self.total, 'call')} failed: {causes}"


def describe(exchange: Exchange) -> str:
    """One line: "200 anthropic.messages claude-sonnet-4-5 · 1,024 in / 56 out · 812 ms"."""
    status = str(exchange.http_status) if exchange.http_status is not None else "no response"
    model = (exchange.request.model if exchange.request else None) or (
        exchange.response.model if exchange.response else None) or "-"
    parts = [f"{status} {exchange.dialect} {model}"]
    if exchange.kind != "model":
        parts[0] += f" ({exchange.kind} call)"
    usage = exchange.response.usage if exchange.response else None
    if usage is not None and (usage.input_tokens is not None or usage.output_tokens is not None):
        tokens_in = sum(n or 0 for n in (usage.input_tokens, usage.cache_read_tokens,
                                         usage.cache_write_tokens))
        parts.append(f"{tokens_in:,} in / {usage.output_tokens or 0:,} out")
    if exchange.ended_at is not None and exchange.started_at:
        parts.append(f"{(exchange.ended_at - exchange.started_at) * 1000:,.0f} ms")
    cause = failure(exchange)
    if cause is not None or exchange.status == ERROR:
        detail = error_detail(exchange)
        parts.append("failed: " + "; ".join(p for p in (cause, detail) if p))
    elif exchange.status != COMPLETE:  # e.g. incomplete: the stream was cut
        parts.append(exchange.status)
    return " · ".join(parts)


def log_exchange(exchange: Exchange) -> Exchange:
    """Log `describe(exchange)` at -v (INFO): with -v every exchange, and so every upstream
    error with its detail, is one line on stderr. Returns the exchange, so it chains as a
    writer's `prepare` step."""
    if log.isEnabledFor(logging.INFO):
        log.info("forge-record: %s %s", exchange.method, describe(exchange))
    return exchange


def count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
