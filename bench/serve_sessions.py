"""Gateway load: many open rollout sessions through one `forge-record serve` replica, streamed
calls with think time, against a bare mitmproxy reverse pass-through in the same run.

    python bench/serve_sessions.py [--sessions 1000] [--calls 3] [--concurrency 50]
                                   [--rounds 1] [--think S] [--lean] [--interleave]
                                   [--against DIR] [--postgres] [--json F]

The upstream is bench/mock_server.py: each answer streams 40 text deltas 5 ms apart (the
engine's think time). Every session is created through the control API and makes `calls`
streamed Messages calls, `concurrency` at a time, first through bench/proxy_server.py --kind
bare (the baseline: same mitmproxy, no recording), then through serve (store: a temp SQLite
file, or with `--postgres` a new database of the local Postgres, whose server CPU a call is
reported too). Reported: calls/s, median and p90 time to first byte and to the end, the
ratio serve / bare, the serve process's resident memory per open session, and the writer's
backlog when the load ends (from /metrics). Not a timed test: numbers depend on the machine.
`--against DIR` adds a second serve whose `forge_record` package is imported from DIR (an
earlier revision laid out as an installed package: recorder/ as forge_record, with addons/,
store/ and harness_shims/ inside it), loaded in the same run. With `--rounds N` every
configuration runs once per round, in an order rotated each round; figures are medians over
rounds, ratios taken round by round. With `--interleave` the configurations run at the same
time instead: every round's calls of all of them are shuffled into one load, so a machine
whose other load drifts (a shared 2-core box) weighs on each configuration alike; its
calls/s is then the whole mix's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from common import descendants, postgres_database, tree_cpu_seconds  # noqa: E402
from serve_gateway import Served  # noqa: E402

# bench/mock_server.py's shape: 40 text deltas 5 ms apart (the engine's think time), 10
# tool-input fragments.
SENT_AT = re.compile(rb'"text":" t(\d+)"')
BODY = json.dumps({"model": "bench-40-5000-10", "max_tokens": 64, "stream": True,
                   "messages": [{"role": "user", "content": "bench"}]}).encode()


def one_call(base: str, token: str) -> tuple[float, float, list[float]]:
    """(seconds to the first body byte, seconds to the end, each text event's delivery
    latency in seconds) of one streamed call. The mock writes its send time (CLOCK_MONOTONIC,
    ns) into every text delta; an event's latency is its arrival time minus that."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    started = time.perf_counter()
    conn.request("POST", parts.path + "/v1/messages", BODY,
                 {"content-type": "application/json", "x-api-key": token,
                  "anthropic-version": "2023-06-01"})
    response = conn.getresponse()
    head = response.read(1)
    first = time.perf_counter() - started
    events, rest = [], [head]
    for line in response:  # one SSE line at a time, as it arrives
        now = time.monotonic_ns()
        rest.append(line)
        if (at := SENT_AT.search(line)) is not None:
            events.append((now - int(at.group(1))) / 1e9)
    total = time.perf_counter() - started
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}: {b''.join(rest)[:300]!r}")
    return first, total, events


async def one_call_async(base: str, token: str) -> tuple[float, float, list[float]]:
    """one_call on an event loop: a rollout load of 1,000 sessions as threads measured the
    client's own thread scheduling (GIL hand-offs), not the proxy."""
    parts = urlsplit(base)
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(b"POST %s/v1/messages HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json"
                 b"\r\nx-api-key: %s\r\nanthropic-version: 2023-06-01\r\ncontent-length: %d"
                 b"\r\nconnection: close\r\n\r\n" % (parts.path.encode(), parts.netloc.encode(),
                                                     token.encode(), len(BODY)) + BODY)
    status = await reader.readline()
    while (await reader.readline()).strip():  # the headers
        pass
    first, events = None, []
    async for line in reader:  # chunk sizes and SSE lines, as they arrive
        now = time.monotonic_ns()
        if first is None:
            first = time.perf_counter() - started
        if (at := SENT_AT.search(line)) is not None:
            events.append((now - int(at.group(1))) / 1e9)
    total = time.perf_counter() - started
    writer.close()
    if b" 200 " not in status:
        raise RuntimeError(f"status {status!r}")
    return first or total, total, events


async def rollout(target: tuple[str, str], calls: int, think: float,
                  rng: random.Random) -> list[tuple[float, float, list[float]]]:
    """One rollout's calls, one after another, as a harness makes them: it starts at a
    random moment within one think time, and waits between calls (running tools) for a
    think time drawn uniformly from half to one and a half of `think`."""
    await asyncio.sleep(rng.uniform(0, think))
    out = []
    for n in range(calls):
        if n:
            await asyncio.sleep(think * rng.uniform(0.5, 1.5))
        out.append(await one_call_async(*target))
    return out


async def rollouts(jobs: list, calls: int, think: float, rng: random.Random) -> list:
    return await asyncio.gather(*(rollout(t, calls, think, random.Random(rng.random()))
                                  for _, t in jobs))


def load(targets: list[tuple[str, str]], calls: int, concurrency: int,
         think: float = 0.0, seed: int = 0) -> dict:
    return mixed_load({"one": targets}, calls, concurrency, think, seed, shuffle=False)["one"]


def mixed_load(targets: dict[str, list], calls: int, concurrency: int, think: float = 0.0,
               seed: int = 0, shuffle: bool = True) -> dict[str, dict]:
    """Every configuration's calls in one load (shuffled together unless `shuffle` is off).
    Without think time, `concurrency` threads make the calls back to back; with it, every
    session is a rollout of its own, all open at once on one event loop (see `rollout`)."""
    rng = random.Random(seed)
    per_session = think > 0
    jobs = [(name, t) for name, ts in targets.items() for t in ts
            for _ in range(1 if per_session else calls)]
    if shuffle:
        rng.shuffle(jobs)
    started = time.perf_counter()
    if per_session:
        results = asyncio.run(rollouts(jobs, calls, think, rng))
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(lambda job: [one_call(*job[1])], jobs))
    took = time.perf_counter() - started
    return {name: figures([r for (n, _), rs in zip(jobs, results, strict=True)
                           if n == name for r in rs], took,
                          calls=sum(map(len, results)) if len(targets) > 1 else None)
            for name in targets}


def figures(results: list, took: float, calls: int | None = None) -> dict:
    firsts, totals = sorted(r[0] for r in results), sorted(r[1] for r in results)
    events = sorted(e for r in results for e in r[2])
    return {"calls": len(results), "calls_per_s": round((calls or len(results)) / took, 1),
            "ttfb_median_ms": round(statistics.median(firsts) * 1000, 2),
            "ttfb_p90_ms": round(firsts[int(len(firsts) * 0.9)] * 1000, 2),
            "total_median_ms": round(statistics.median(totals) * 1000, 2),
            "event_median_ms": round(statistics.median(events) * 1000, 2),
            "event_p99_ms": round(events[int(len(events) * 0.99)] * 1000, 2)}


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
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--against", type=Path, help="an earlier revision's package directory")
    p.add_argument("--think", type=float, default=0.0,
                   help="seconds a rollout waits between its calls (mean): every session "
                        "then runs its calls one after another, all sessions at once")
    p.add_argument("--lean", action="store_true",
                   help="also a lean pass-through: mitmproxy with only the stock addons serve "
                        "keeps (bench/proxy_server.py --kind lean), so serve / lean is what "
                        "recording costs and bare / lean what trimming the addons saves")
    p.add_argument("--interleave", action="store_true",
                   help="run the configurations at once, their calls shuffled together")
    p.add_argument("--postgres", action="store_true",
                   help="each serve stores into a new database of the local Postgres, not a "
                        "SQLite file; the server's CPU a call is reported beside serve's")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    out: dict = {"sessions": args.sessions, "calls_per_session": args.calls,
                 "concurrency": args.concurrency, "rounds": args.rounds,
                 "interleaved": args.interleave, "think_s": args.think,
                 "model": "bench-40-5000-10"}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as databases:
        def store(name: str) -> tuple[str, Callable[[], float] | None]:
            """(a serve's store URL, a function giving its server's CPU seconds so far, or
            None for SQLite, which has no server)"""
            if not args.postgres:
                return f"sqlite:///{tmp}/{name}.db", None
            return databases.enter_context(postgres_database(f"bench_serve_{name}_{os.getpid()}"))

        mock = subprocess.Popen([sys.executable, str(ROOT / "bench/mock_server.py")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        mock_url = f"http://127.0.0.1:{int(mock.stdout.readline().split()[1])}"
        kinds = ["bare", "lean"] if args.lean else ["bare"]
        passes = {kind: pass_through(kind, mock_url, f"{tmp}/{kind}") for kind in kinds}
        stores = {"serve": store("gw"), **({"serve_before": store("before")}
                                            if args.against else {})}
        gateways = {"serve": Served(Path(tmp) / "gw", stores["serve"][0], [mock_url])}
        if args.against:
            gateways["serve_before"] = Served(
                Path(tmp) / "before", stores["serve_before"][0], [mock_url],
                env={"PYTHONPATH": str(args.against.resolve())})
        try:
            idle = {name: rss_kib(gw.proc.pid) for name, gw in gateways.items()}
            targets = {name: [(base, "sk-dummy")] * args.sessions
                       for name, (_, base) in passes.items()}
            for name, gw in gateways.items():
                sessions = [gw.client.create_session("claude-code")
                            for _ in range(args.sessions)]
                targets[name] = [(s["base_url"], s["token"]) for s in sessions]
            pids = {**{name: proc.pid for name, (proc, _) in passes.items()},
                    **{name: gw.proc.pid for name, gw in gateways.items()}}
            server = {name: cpu() for name, (_, cpu) in stores.items() if cpu}
            rounds = run_rounds(targets, args, pids)
            out.update(summarize(rounds))
            for name, before in server.items():  # every round's calls, the server's CPU
                calls = sum(r[name]["calls"] for r in rounds)
                out[name]["postgres_cpu_ms_per_call"] = round(
                    1000 * (stores[name][1]() - before) / calls, 2)
            for name, gw in gateways.items():
                with urllib_open(f"{gw.url}/metrics") as text:
                    out[name]["writer_backlog_at_end"] = metric(
                        text, "forge_record_gateway_writer_backlog")
                    # what the gateway adds before forwarding (finding the session), per call
                    took = metric(text, "forge_record_gateway_resolve_seconds_sum")
                    calls = metric(text, "forge_record_gateway_resolve_seconds_count")
                    out[name]["resolve_ms_mean"] = round(1000 * took / calls, 3) \
                        if took is not None and calls else None
                out[name]["rss_kib_per_session"] = round(
                    (rss_kib(gw.proc.pid) - idle[name]) / args.sessions, 1)
                out[name]["writer_rss_kib"] = sum(map(rss_kib, descendants(gw.proc.pid)))
        finally:
            for gw in gateways.values():
                gw.stop()
            for proc in [proc for proc, _ in passes.values()] + [mock]:
                proc.stdin.close()
                proc.wait()
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)


def pass_through(kind: str, upstream: str, confdir: str) -> tuple[subprocess.Popen, str]:
    """bench/proxy_server.py in reverse mode: the process and its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench/proxy_server.py"), "--kind", kind, "--mode",
         "reverse", "--upstream", upstream, "--confdir", confdir],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline().split()[1])}"


def run_rounds(targets: dict[str, list], args, pids: dict[str, int]) -> list[dict[str, dict]]:
    """Each configuration once per round, the order rotated every round (or all at once).
    Run one at a time, each configuration's proxy CPU per call is measured too."""
    names = list(targets)
    rounds = []
    for n in range(args.rounds):
        if args.interleave:
            rounds.append(mixed_load(targets, args.calls, args.concurrency, args.think, seed=n))
        else:
            order = names[n % len(names):] + names[:n % len(names)]
            rounds.append({})
            for name in order:
                cpu = tree_cpu_seconds(pids[name])
                rounds[-1][name] = load(targets[name], args.calls, args.concurrency, args.think, n)
                rounds[-1][name]["proxy_cpu_ms_per_call"] = round(
                    1000 * (tree_cpu_seconds(pids[name]) - cpu) / rounds[-1][name]["calls"], 2)
        print(f"round {n + 1}: " + json.dumps(rounds[-1]), file=sys.stderr)
    return rounds


def summarize(rounds: list[dict[str, dict]]) -> dict:
    """Medians over rounds per configuration; each serve's ratios to bare (and to the
    earlier revision), the median of the per-round ratios."""
    def median_of(name: str, key: str) -> float:
        return round(statistics.median(r[name][key] for r in rounds), 2)

    def ratio(name: str, base: str, key: str) -> float:
        return round(statistics.median(r[name][key] / r[base][key] for r in rounds), 2)

    out: dict = {}
    for name in rounds[0]:
        out[name] = {key: median_of(name, key) for key in rounds[0][name]}
    for name in out:
        if name == "bare":
            continue
        out[name]["ttfb_ratio_to_bare"] = ratio(name, "bare", "ttfb_median_ms")
        out[name]["ttfb_p90_ratio_to_bare"] = ratio(name, "bare", "ttfb_p90_ms")
        out[name]["total_ratio_to_bare"] = ratio(name, "bare", "total_median_ms")
        out[name]["event_ratio_to_bare"] = ratio(name, "bare", "event_median_ms")
        out[name]["event_p99_ratio_to_bare"] = ratio(name, "bare", "event_p99_ms")
        out[name]["throughput_ratio_to_bare"] = ratio(name, "bare", "calls_per_s")
    if "lean" in out:
        out["serve"]["ttfb_ratio_to_lean"] = ratio("serve", "lean", "ttfb_median_ms")
        out["serve"]["event_ratio_to_lean"] = ratio("serve", "lean", "event_median_ms")
    if "serve_before" in out:
        out["serve"]["ttfb_ratio_to_before"] = ratio("serve", "serve_before", "ttfb_median_ms")
        out["serve"]["event_ratio_to_before"] = ratio("serve", "serve_before",
                                                      "event_median_ms")
    return out


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
