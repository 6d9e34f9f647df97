"""The latency benchmark's two clients: the official `anthropic` SDK and raw httpx2.

Each `stream_once` makes one streamed Messages call on a warm client and returns a `Timing`:
request start, the arrival time of every text delta with the time the mock sent it (the
mock writes its CLOCK_MONOTONIC send time into each delta's text, ` t<ns>`), and the end.
Both clients keep connections alive between calls (keepalive_expiry is raised above a
benchmark round), so figures are for warm connections, as in an agent's steady state.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import anthropic
import httpx2
import orjson
from common import DUMMY_KEY

_SENT = re.compile(rb'"text_delta","text":" t(\d+)"')
_LIMITS = httpx2.Limits(max_connections=10, max_keepalive_connections=10, keepalive_expiry=600)
_TIMEOUT = httpx2.Timeout(60.0, connect=10.0)
TOOLS = [{
    "name": "Bash", "description": "Run a shell command in the project and return its output.",
    "input_schema": {"type": "object", "required": ["command"],
                     "properties": {"command": {"type": "string"},
                                    "description": {"type": "string"},
                                    "timeout": {"type": "integer"}}},
}]


def history(size_kb: int) -> list[dict]:
    """A conversation of about `size_kb` KB, like an agent's resent history."""
    turn = "Here is the file you asked for:\n" + "def f(x):\n    return x * 2\n" * 12
    messages, size = [], 0
    while size < size_kb * 1024:
        messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": "OK."}]
        size += len(turn) + 3
    messages.append({"role": "user", "content": "Now run the parser tests."})
    return messages


@dataclass
class Target:
    """Where a client sends its calls: a base URL, reached directly or through a proxy."""
    name: str
    base_url: str
    proxy: str | None = None
    verify: str | bool = True


@dataclass
class Timing:
    start: int  # ns, CLOCK_MONOTONIC
    end: int = 0
    stop: int = 0  # when message_stop arrived
    arrivals: list[tuple[int, int]] = field(default_factory=list)  # (arrived, sent), ns

    def summary(self) -> dict[str, float | bool | int]:
        if not self.arrivals:
            raise RuntimeError("the stream carried no text delta")
        lags = [(a - s) / 1e6 for a, s in self.arrivals]
        first_arrival, last_sent = self.arrivals[0][0], self.arrivals[-1][1]
        return {
            "ttft_ms": (first_arrival - self.start) / 1e6,
            "total_ms": (self.end - self.start) / 1e6,
            "event_lags_ms": lags,
            # Never buffered: the first token reached the client while the mock was still
            # sending text (before it sent the last delta).
            "streamed": first_arrival < last_sent,
            "events": len(lags),
            # How long the stream's end (the last chunk) trailed its last event: what a
            # proxy does between passing message_stop on and ending the response.
            "eom_ms": (self.end - self.stop) / 1e6 if self.stop else float("nan"),
        }


class SdkClient:
    name = "sdk"

    def __init__(self, target: Target) -> None:
        http = anthropic.DefaultHttpxClient(proxy=target.proxy, verify=target.verify,
                                            limits=_LIMITS, timeout=_TIMEOUT)
        self.client = anthropic.Anthropic(api_key=DUMMY_KEY, base_url=target.base_url,
                                          http_client=http, max_retries=0)

    def stream_once(self, model: str, messages: list[dict]) -> Timing:
        timing = Timing(time.monotonic_ns())
        with self.client.messages.stream(model=model, max_tokens=4096, messages=messages,
                                         tools=TOOLS) as stream:
            for event in stream:
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    timing.arrivals.append((time.monotonic_ns(), int(event.delta.text[2:])))
                elif event.type == "message_stop":
                    timing.stop = time.monotonic_ns()
        timing.end = time.monotonic_ns()
        return timing

    def close(self) -> None:
        self.client.close()


class RawClient:
    name = "raw"

    def __init__(self, target: Target) -> None:
        self.url = target.base_url + "/v1/messages"
        self.client = httpx2.Client(proxy=target.proxy, verify=target.verify, limits=_LIMITS,
                                    timeout=_TIMEOUT)
        self.headers = {"x-api-key": DUMMY_KEY, "anthropic-version": "2023-06-01",
                        "content-type": "application/json", "accept": "text/event-stream"}

    def stream_once(self, model: str, messages: list[dict]) -> Timing:
        body = orjson.dumps({"model": model, "max_tokens": 4096, "stream": True,
                             "messages": messages, "tools": TOOLS})
        timing = Timing(time.monotonic_ns())
        pending = b""
        with self.client.stream("POST", self.url, content=body, headers=self.headers) as r:
            for chunk in r.iter_raw():
                now = time.monotonic_ns()
                # Only whole events are searched, so a delta split across chunks is read once
                # it is complete, and timed by the chunk that completed it.
                whole, sep, pending = (pending + chunk).rpartition(b"\n\n")
                timing.arrivals += [(now, int(s)) for s in _SENT.findall(whole)]
                if b"event: message_stop" in whole:
                    timing.stop = now
        timing.end = time.monotonic_ns()
        return timing

    def close(self) -> None:
        self.client.close()


CLIENTS = {"sdk": SdkClient, "raw": RawClient}
