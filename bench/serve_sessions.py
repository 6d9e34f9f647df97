"""Gateway load: many open rollout sessions through one `forge-record serve` replica, streamed
calls with think time, against a bare mitmproxy reverse pass-through in the same run.

    python bench/serve_sessions.py [--sessions 1000] [--calls 3] [--concurrency 50]
                                   [--json F]

The upstream is bench/mock_server.py: each answer streams 40 text deltas 5 ms apart (the
engine's think time). Every session is created through the control API and makes `calls`
streamed Messages calls, `concurrency` at a time, first through bench/proxy_server.py --kind
bare (the baseline: same mitmproxy, no recording), then through serve (store: a temp SQLite
file). Reported: calls/s, median and p90 time to first byte and to the end, the ratio serve /
bare, the serve process's resident memory per open session, and the writer's backlog when
the load ends (from /metrics). Not a timed test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from serve_gateway import Served  # noqa: E402

# bench/mock_server.py's shape: 40 text deltas 5 ms apart (the engine's think time), 10
# tool-input fragments.
BODY = json.dumps({"model": "bench-40-5000-10", "max_tokens": 64, "stream": True,
                   "messages": [{"role": "user", "content": "bench"}]}).encode()


def one_call(base: str, token: str) -> tuple[float, float]:
    """(seconds to the first body byte, seconds to the end) of one streamed call."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    started = time.perf_counter()
    conn.request("POST", parts.path + "/v1/messages", BODY,
                 {"content-type": "application/json", "x-api-key": token,
                  "anthropic-version": "2023-06-01"})
    response = conn.getresponse()
    head = response.read(1)
    first = time.perf_counter() - started
    rest = response.read()
    total = time.perf_counter() - started
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}: {(head + rest)[:300]!r}")
    return first, total


def load(targets: list[tuple[str, str]], calls: int, concurrency: int) -> dict:
    jobs = [t for t in targets for _ in range(calls)]
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda t: one_call(*t), jobs))
    took = time.perf_counter() - started
    firsts, totals = sorted(r[0] for r in results), sorted(r[1] for r in results)
    return {"calls": len(jobs), "calls_per_s": round(len(jobs) / took, 1),
            "ttfb_median_ms": round(statistics.median(firsts) * 1000, 2),
            "ttfb_p90_ms": round(firsts[int(len(firsts) * 0.9)] * 1000, 2),
            "total_median_ms": round(statistics.median(totals) * 1000, 2)}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    out: dict = {"sessions": args.sessions, "calls_per_session": args.calls,
                 "concurrency": args.concurrency, "model": "bench-40-5000-10"}
    with tempfile.TemporaryDirectory() as tmp:
        mock = subprocess.Popen([sys.executable, str(ROOT / "bench/mock_server.py")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        mock_url = f"http://127.0.0.1:{int(mock.stdout.readline().split()[1])}"
        bare = subprocess.Popen(
            [sys.executable, str(ROOT / "bench/proxy_server.py"), "--kind", "bare", "--mode",
             "reverse", "--upstream", mock_url, "--confdir", f"{tmp}/bare"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        port = int(bare.stdout.readline().split()[1])
        bare_base = f"http://127.0.0.1:{port}"
        gw = Served(Path(tmp) / "gw", f"sqlite:///{tmp}/gw.db", [mock_url])
        try:
            idle = rss_kib(gw.proc.pid)
            sessions = [gw.client.create_session("claude-code") for _ in range(args.sessions)]
            out["bare"] = load([(bare_base, "sk-dummy")] * args.sessions, args.calls,
                               args.concurrency)
            out["serve"] = load([(s["base_url"], s["token"]) for s in sessions], args.calls,
                                args.concurrency)
            with urllib_open(f"{gw.url}/metrics") as text:
                out["delivery_backlog_at_end"] = metric(
                    text, "forge_record_gateway_delivery_backlog")
                out["writer_backlog_at_end"] = metric(text, "forge_record_gateway_writer_backlog")
            loaded = rss_kib(gw.proc.pid)
            out["rss_kib_per_session"] = round((loaded - idle) / args.sessions, 1)
            out["ttfb_ratio"] = round(out["serve"]["ttfb_median_ms"]
                                      / out["bare"]["ttfb_median_ms"], 2)
            out["throughput_ratio"] = round(out["serve"]["calls_per_s"]
                                            / out["bare"]["calls_per_s"], 2)
        finally:
            gw.stop()
            for proc in (bare, mock):
                proc.stdin.close()
                proc.wait()
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)


class urllib_open:
    """The text of a GET, as a context manager (keeps main() flat)."""

    def __init__(self, url: str) -> None:
        import urllib.request

        self._response = urllib.request.urlopen(url, timeout=30)

    def __enter__(self) -> str:
        return self._response.read().decode()

    def __exit__(self, *exc) -> None:
        self._response.close()


if __name__ == "__main__":
    main()
