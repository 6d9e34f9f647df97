"""The dialect bridge's added latency through the proxy: TTFT and per-event gaps of a streamed
engine answer, bridged from each agent dialect, against the engine path passed through.

    .venv/bin/python bench/bridge_latency.py [--tokens N] [--interval-ms MS] [--rounds R] [--json F]

The engine is the project's vLLM-faithful mock (forge_record.mock.engine) streaming a text of
about N tokens, one chunk per token, MS ms apart. Configurations, each a proxy in reverse mode
(the in-process proxy the tests use) in a process of its own, all in front of the same engine:
  chat       a Chat Completions call with the engine set (token asks added): the engine path
  messages   the same content as an Anthropic Messages call, bridged
  responses  a Responses call, bridged
  gemini     a Gemini streamGenerateContent call, bridged
  bare       mitmproxy passing `chat` through (bench/passthrough.py), no recorder
Rounds are interleaved (every configuration once a round, the order rotated); each figure is
the median over rounds. TTFT: request sent to the first token's text received. Per event: the
gaps between reads that carry text (the engine paces them, so the gap over the interval is
what the path adds). Ratios are to `chat` and to `bare`. The engine (a thread) and the client
share this process: the ratios compare like with like, absolute times include that GIL.

`--writer-calls N`: instead, the store writer's CPU per 1,000 tokens recorded for N calls of
each configuration (`chat` the baseline; a bridged call is two records), see writer_cpu.
"""

from __future__ import annotations

import argparse
import http.client
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Children, fmt, machine_markdown, machine_notes, median, percentile  # noqa: E402
from passthrough import PassThrough  # noqa: E402

from forge_record.addons.proxy import InProcessProxy  # noqa: E402
from forge_record.addons.recorder import Recorder  # noqa: E402
from forge_record.mock import MockUpstream, Received, Reply  # noqa: E402
from forge_record.mock import engine as mock_engine  # noqa: E402
from forge_record.trust import confdir  # noqa: E402

MODEL = "mock-engine"
USER = "Write."
# configuration -> (the host its proxy stands in for, path, request body)
CALLS = {
    "chat": ("api.openai.com", "/v1/chat/completions",
             {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": USER}]}),
    "messages": ("api.anthropic.com", "/v1/messages",
                 {"model": MODEL, "max_tokens": 4096, "stream": True,
                  "messages": [{"role": "user", "content": USER}]}),
    "responses": ("api.openai.com", "/v1/responses",
                  {"model": MODEL, "stream": True, "input": USER, "max_output_tokens": 4096}),
    "gemini": ("generativelanguage.googleapis.com",
               f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse",
               {"contents": [{"role": "user", "parts": [{"text": USER}]}]}),
    "bare": ("api.openai.com", "/v1/chat/completions", None),  # chat's request
}
FIRST = b"w0"  # the first token's text, in every dialect's first text event


def _paced(chunks: Iterator[bytes], interval: float) -> Iterator[bytes]:
    for chunk in chunks:
        time.sleep(interval)  # a decode step
        yield chunk


def paced_engine(tokens: int, interval: float) -> MockUpstream:
    """The mock engine answering every call with the same text, a chunk every `interval` s."""
    def chat(mock: MockUpstream, received: Received) -> Reply:
        reply = mock_engine._chat(mock, received)
        if isinstance(reply.body, bytes | bytearray):
            return reply
        return Reply.stream(_paced(iter(reply.body), interval))

    routes = [("POST", lambda p: p.endswith("/v1/chat/completions"), chat),
              *mock_engine.ROUTES[1:]]
    text = "".join(f"w{i % 50} " for i in range(tokens // 2))  # a word and a space: 2 tokens
    return MockUpstream(routes=routes, options={"engine_script": [{"text": text.strip()}],
                                                "engine_model": MODEL})


def serve(name: str, engine_url: str, tmp: Path) -> None:
    """A child's life: one reverse proxy for `name` (mitmproxy allows one a process) until
    stdin closes. The recorded ones bridge to the engine and drop what they record."""
    host = CALLS[name][0]
    if name == "bare":
        addon = PassThrough(stream=True)
        mode = f"reverse:{engine_url}"
    else:
        addon = Recorder(lambda _ex: None, upstreams={host: engine_url}, record_any_host=True,
                         engine="vllm", engine_model=MODEL, top_logprobs=2)
        mode = f"reverse:https://{host}"
    proxy = InProcessProxy(addon, mode=mode, confdir=confdir(tmp / name))
    print(f"listening {proxy.start()}", flush=True)
    sys.stdout = sys.stderr  # nobody reads this pipe past the first line: never fill it
    try:
        sys.stdin.read()
    finally:
        proxy.stop()


def start_proxies(children: Children, engine_url: str, tmp: Path, configs: list[str]
                  ) -> dict[str, int]:
    """One proxy process per configuration (bench/common.py's Children end them)."""
    ports = {}
    for name in configs:
        child = children.start([__file__, "--serve", name, "--engine-url", engine_url,
                                "--tmp", str(tmp)], name)
        ports[name] = int(child.expect("listening", 60)[0])
    return ports


def one_call(port: int, name: str) -> dict:
    """One streamed call on a fresh connection: TTFT and the gaps between text reads (ms)."""
    _, path, body = CALLS[name]
    if body is None:
        path, body = CALLS["chat"][1], CALLS["chat"][2]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.putrequest("POST", path, skip_accept_encoding=True)
    data = orjson.dumps(body)
    for key, value in (("content-type", "application/json"), ("content-length", str(len(data))),
                       ("authorization", "Bearer dummy"), ("x-api-key", "dummy"),
                       ("x-goog-api-key", "dummy")):
        conn.putheader(key, value)
    start = time.perf_counter()
    conn.endheaders(data)
    response = conn.getresponse()
    ttft, arrivals, size = None, [], 0
    while chunk := response.read1(65536):
        now = time.perf_counter()
        size += len(chunk)
        if ttft is None and FIRST in chunk:
            ttft = now - start
        if ttft is not None and (b"text" in chunk or b"content" in chunk):
            arrivals.append(now)
    conn.close()
    if response.status != 200 or ttft is None:
        raise RuntimeError(f"{name}: status {response.status}, first token seen: {ttft}")
    gaps = [(b - a) * 1e3 for a, b in zip(arrivals, arrivals[1:], strict=False)]
    return {"ttft_ms": ttft * 1e3, "event_p50_ms": median(gaps),
            "event_p99_ms": percentile(gaps, 99), "reads": len(arrivals), "bytes": size}


def writer_cpu(tokens: int, calls: int, tmp: Path, name: str = "messages") -> dict:
    """The writer process's work for `calls` calls of configuration `name` (bridged, or
    `chat`: the engine path, the baseline) with engine tokens:
    finalize + pairs join (writer_process._preparer) + store write (SQLite), CPU seconds
    (time.process_time) per 1,000 completion tokens recorded. The calls go through one
    proxy in this process first; only the writer's part is timed."""
    from forge_record.records import Session
    from forge_record.store import open_store
    from forge_record.store.batch import AddSession
    from forge_record.store.items import AddExchange
    from forge_record.writer_process import _preparer

    captured: list = []
    with paced_engine(tokens, 0.0) as engine:
        host = CALLS[name][0]
        recorder = Recorder(captured.append, upstreams={host: engine.url}, record_any_host=True,
                            engine="vllm", engine_model=MODEL, top_logprobs=2)
        proxy = InProcessProxy(recorder, mode=f"reverse:https://{host}",
                               confdir=confdir(tmp / "writer"))
        port = proxy.start()
        try:
            for _ in range(calls):
                one_call(port, name)
        finally:
            proxy.stop()
    deadline = time.monotonic() + 10
    expected = calls if name == "chat" else 2 * calls  # bridged: the agent's and the engine's
    while len(captured) < expected and time.monotonic() < deadline:
        time.sleep(0.01)
    prepare = _preparer(redact_bodies=False)
    store = open_store(f"sqlite:///{tmp}/writer-{name}.db")
    session = Session(id="bench-bridge", harness="claude-code", started_at=time.time())
    store.write([AddSession(session, None, time.time())])
    t0 = time.process_time()
    for exchange in captured:
        store.write([AddExchange(session.id, prepare(session.id, exchange))])
    cpu = time.process_time() - t0
    store.close()
    recorded = calls * 2 * (tokens // 2)  # words and spaces, the end-of-turn token: per call
    return {"config": name, "calls": calls, "exchanges": len(captured), "tokens": recorded,
            "cpu_ms_per_1k_tokens": 1e3 * cpu / recorded * 1e3}


FIGURES = ("ttft_ms", "event_p50_ms", "event_p99_ms")


def measure(tokens: int, interval_ms: float, rounds: int, configs: list[str]) -> dict:
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    with (tempfile.TemporaryDirectory(prefix="fr-bridge-") as tmp, Children() as children,
          paced_engine(tokens, interval_ms / 1e3) as engine):
        ports = start_proxies(children, engine.url, Path(tmp), configs)
        for name in configs:  # warm each path once before timing anything
            one_call(ports[name], name)
        for r in range(rounds):
            shift = r % len(configs)
            for name in configs[shift:] + configs[:shift]:
                runs[name].append(one_call(ports[name], name))
    summary = {c: {f: median([x[f] for x in rs]) for f in FIGURES} | {"reads": rs[0]["reads"]}
               for c, rs in runs.items()}
    return {"params": {"tokens": tokens, "interval_ms": interval_ms, "rounds": rounds},
            "summary": summary}


def markdown(result: dict) -> str:
    p, s = result["params"], result["summary"]
    lines = [f"Engine: ~{p['tokens']} tokens, a chunk every {p['interval_ms']:g} ms; "
             f"{p['rounds']} interleaved rounds, medians. Times in ms.", "",
             "| config | TTFT | event p50 | event p99 | text reads | TTFT / chat | TTFT / bare "
             "| p50 / bare | p99 / bare |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    chat, bare = s.get("chat"), s.get("bare")
    for name, row in s.items():
        def r(f: str, base: dict | None, row: dict = row) -> str:
            return fmt(row[f] / base[f]) if base and base[f] else "-"
        lines.append(f"| {name} | {fmt(row['ttft_ms'])} | {fmt(row['event_p50_ms'], 3)} | "
                     f"{fmt(row['event_p99_ms'], 3)} | {row['reads']} | {r('ttft_ms', chat)} | "
                     f"{r('ttft_ms', bare)} | {r('event_p50_ms', bare)} | "
                     f"{r('event_p99_ms', bare)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--interval-ms", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--configs", default=",".join(CALLS))
    ap.add_argument("--writer-calls", type=int, default=0,
                    help="instead: the writer CPU per 1,000 tokens over this many bridged calls")
    ap.add_argument("--json", type=Path, help="write the result here")
    ap.add_argument("--serve", choices=sorted(CALLS), help=argparse.SUPPRESS)  # a child
    ap.add_argument("--engine-url", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.serve, args.engine_url, args.tmp)
        return {}
    if args.writer_calls:
        with tempfile.TemporaryDirectory(prefix="fr-bridge-writer-") as tmp:
            result = {name: writer_cpu(args.tokens, args.writer_calls, Path(tmp), name)
                      for name in args.configs.split(",") if name != "bare"}
        print(machine_markdown(machine_notes()) + "\n\n" + str(result))
    else:
        result = measure(args.tokens, args.interval_ms, args.rounds, args.configs.split(","))
        print(machine_markdown(machine_notes()) + "\n\n" + markdown(result))
    if args.json:
        args.json.write_text(orjson.dumps(result).decode())
    return result


if __name__ == "__main__":
    main()
