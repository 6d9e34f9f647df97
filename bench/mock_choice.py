"""Which mock upstream the benchmarks use: the project's test mock or bench/mock_server.py.

    python bench/mock_choice.py [--runs 3] [--exchanges 2000]

Both serve the same stream (bench/mock_server.py's plan; the test mock gets it as an extra
route whose generator sleeps between deltas), each in a process of its own, reached directly
(no proxy); the test mock also with TCP_NODELAY set. Measured: exchanges/s with 20
concurrent clients on small streams (the throughput benchmark's direct reference must be far
above any proxy's rate, or it measures the mock), and for the 500-delta, 2 ms stream: how
far apart consecutive deltas were sent (the schedule's jitter, from the send times the
deltas carry) and the per-event delivery latency a raw client sees. The figures and the
decision are in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clients import RawClient, Target, history  # noqa: E402
from common import BENCH, Children, median, percentile, start_mock  # noqa: E402
from mock_server import _MODEL, _text_event, stream_plan  # noqa: E402
from throughput import _load  # noqa: E402


def _bench_route(mock, received):
    """The bench stream from the test mock: a generator, paced with time.sleep."""
    from forge_record.mock import Reply

    text, interval_us, fragments = (int(g) for g in _MODEL.search(received.body).groups())

    def events():
        start, tick = time.monotonic(), 0
        for event in stream_plan(text, fragments, "msg_bench000000000000001"):
            if interval_us and (event is None or b"input_json_delta" in event):
                delay = start + tick * interval_us / 1e6 - time.monotonic()
                tick += 1
                if delay > 0:
                    time.sleep(delay)
            yield event if event is not None else _text_event(time.monotonic_ns())

    return Reply.stream(events())


def serve_project_mock(nodelay: bool) -> None:
    from http.server import BaseHTTPRequestHandler

    from forge_record.mock import MockUpstream

    # socketserver's switch for TCP_NODELAY; off by default, so Nagle's algorithm may hold a
    # small chunk back until the previous one is acknowledged.
    BaseHTTPRequestHandler.disable_nagle_algorithm = nodelay

    route = ("POST", lambda path: re.search(r"/v1/messages$", path) is not None, _bench_route)
    with MockUpstream(routes=[route]) as mock:
        print(f"listening {mock.url.rsplit(':', 1)[1]}", flush=True)
        sys.stdin.read()


def _latency(url: str, runs: int) -> dict[str, float]:
    client = RawClient(Target("direct", url))
    messages = history(32)
    client.stream_once("bench-5-0-3", messages)
    gaps, lags = [], []
    for _ in range(runs):
        timing = client.stream_once("bench-500-2000-40", messages)
        sent = [s for _, s in timing.arrivals]
        gaps += [(b - a) / 1e6 for a, b in zip(sent, sent[1:], strict=False)]
        lags += [(a - s) / 1e6 for a, s in timing.arrivals]
    client.close()
    return {"gap_p50_ms": median(gaps), "gap_p99_ms": percentile(gaps, 99),
            "gap_max_ms": max(gaps), "lag_p50_ms": median(lags), "lag_p99_ms": percentile(lags, 99)}


def main() -> None:
    if sys.argv[1:2] == ["--serve-project-mock"]:
        return serve_project_mock(sys.argv[2:] == ["--nodelay"])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--exchanges", type=int, default=2000)
    args = ap.parse_args()
    print("| mock | exchanges/s (20 clients) | delta gap p50 / p99 / max (ms) "
          "| delivery p50 / p99 (ms) |\n|---|---:|---|---|")
    with Children() as children:
        _, bench_url = start_mock(children)
        mocks = [("bench/mock_server.py (asyncio)", bench_url)]
        for label, extra in (("", []), (" + TCP_NODELAY", ["--nodelay"])):
            project = children.start([str(BENCH / "mock_choice.py"), "--serve-project-mock",
                                      *extra], "project mock")
            mocks.append((f"forge_record.mock (ThreadingHTTPServer){label}",
                          f"http://127.0.0.1:{project.expect('listening', 20)[0]}"))
        load = {"concurrency": 20, "model": "bench-20-0-10"}
        for name, url in mocks:
            port = int(url.rsplit(":", 1)[1])
            _load(port, load, 100, None)
            done = _load(port, load, args.exchanges, None)
            r = _latency(url, args.runs)
            print(f"| {name} | {done['exchanges'] / done['seconds']:.0f} | "
                  f"{r['gap_p50_ms']:.3f} / {r['gap_p99_ms']:.3f} / {r['gap_max_ms']:.3f} | "
                  f"{r['lag_p50_ms']:.3f} / {r['lag_p99_ms']:.3f} |")


if __name__ == "__main__":
    main()
