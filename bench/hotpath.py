"""The recorder's own work on the proxy's event loop, alone: CPU per event and per exchange.

    python bench/hotpath.py [--repeat N] [--profile]

Feeds the benchmark streams (bench/mock_server.py's plan: the latency stream of 500 text
deltas + 40 tool-input fragments, and the throughput benchmark's small stream) into
forge_record.capture.Capture one SSE event per chunk, as mitmproxy hands them to the tee,
and reports CPU time (time.process_time, so other processes on the machine matter little):
`tee` per event, `finish` per exchange (both on the event loop), and `finalize` per exchange
(folding the response, parsing the request, in the writer). `--profile` prints cProfile's
top functions for the tee path and the fold. No proxy, no sockets: this isolates what
recorder/capture.py, sse.py, content_encoding.py and decoders/anthropic_messages.py cost.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import orjson  # noqa: E402
from clients import TOOLS, history  # noqa: E402
from mock_server import _text_event, stream_plan  # noqa: E402

from forge_record.capture import Capture  # noqa: E402
from forge_record.decoders import dialect_for  # noqa: E402
from forge_record.finalize import finalize  # noqa: E402

STREAMS = {"latency": (500, 40, 32), "throughput": (20, 10, 1)}  # text, fragments, request KB


def _events(text: int, fragments: int) -> list[bytes]:
    return [e if e is not None else _text_event(time.monotonic_ns() + i)
            for i, e in enumerate(stream_plan(text, fragments, "msg_bench000000000000001"))]


def _capture(body: bytes) -> Capture:
    dialect = dialect_for("POST", "/v1/messages")
    capture = Capture(dialect, seq=1, method="POST", url="https://api.anthropic.com/v1/messages",
                      path="/v1/messages", headers=[("content-type", "application/json"),
                                                    ("x-api-key", "sk-ant-dummy")], body=body)
    capture.response_started(200, [("content-type", "text/event-stream")],
                             "text/event-stream; charset=utf-8", "")
    return capture


def measure(name: str, repeat: int) -> dict[str, float]:
    text, fragments, kb = STREAMS[name]
    events = _events(text, fragments)
    body = orjson.dumps({"model": "claude-bench", "max_tokens": 4096, "stream": True,
                         "messages": history(kb), "tools": TOOLS})
    tee = finish = prep = 0.0
    for _ in range(repeat):
        capture = _capture(body)
        t0 = time.process_time()
        for event in events:
            capture.tee(event)
        capture.tee(b"")  # mitmproxy's end-of-stream call
        t1 = time.process_time()
        exchange = capture.finish()
        t2 = time.process_time()
        finalize(exchange)  # the response is folded here, in the writer
        t3 = time.process_time()
        tee, finish, prep = tee + t1 - t0, finish + t2 - t1, prep + t3 - t2
        assert exchange.status == "complete", exchange.flags
    return {"events": len(events), "tee_us_per_event": 1e6 * tee / repeat / len(events),
            "tee_ms_per_exchange": 1e3 * tee / repeat,
            "finish_ms_per_exchange": 1e3 * finish / repeat,
            "finalize_ms_per_exchange": 1e3 * prep / repeat}


def profile(repeat: int) -> None:
    events = _events(*STREAMS["latency"][:2])
    profiler = cProfile.Profile()
    for _ in range(repeat):
        capture = _capture(b"{}")
        profiler.enable()
        for event in events:
            capture.tee(event)
        finalize(capture.finish())
        profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    print("| stream | events | tee µs/event | tee ms/exchange | finish ms | finalize ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in STREAMS:
        r = measure(name, args.repeat)
        print(f"| {name} | {r['events']} | {r['tee_us_per_event']:.2f} | "
              f"{r['tee_ms_per_exchange']:.3f} | {r['finish_ms_per_exchange']:.3f} | "
              f"{r['finalize_ms_per_exchange']:.3f} |")
    if args.profile:
        profile(args.repeat)


if __name__ == "__main__":
    main()
