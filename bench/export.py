"""Export: a 10,000-exchange synthetic store exported to `openai`, exchanges/s and memory.

    python bench/export.py [--shape small|claude-code] [--exchanges N] [--format F]
                           [--json FILE] [--keep DIR]

Builds stores of N/4, N/2 and N exchanges (the same session shape, more sessions) with the
Store API in a temp dir, then exports each in a fresh child process (`--child`), which
reports its wall time and its peak RSS (VmHWM), plus its peak RSS before the export began
(after imports and opening the store). Exchanges/s = exchanges in the store / export wall
time, everything included: reading and rebuilding records, lineage, conversion, writing.
Flat memory shows as the same peak at N/4, N/2 and N: the exporter holds one session at a
time, so its peak follows the largest session, not the store.

Shapes:
- small: sessions of 50 model calls and a side call, short contexts (a 1 KB system prompt,
  two tools, each turn adds a text + tool call and a ~300 byte tool result: requests of 49
  messages and 17 KB of normalized JSON on average, 33 KB at most), as short tasks make them.
- claude-code: bench/gen_session.py's Claude Code sessions (150 calls, 15 KB system prompt,
  20 KB of tools, thinking, a subagent and title calls, contexts growing to ~540 KB), eight
  seeds cycled over the sessions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from forge_record.records import (  # noqa: E402
    COMPLETE,
    Exchange,
    Message,
    Request,
    Response,
    Session,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    Usage,
)
from forge_record.store import default_store_url, open_store  # noqa: E402
from forge_record.store.batch import AddSession  # noqa: E402
from forge_record.store.items import AddExchange

SMALL_CALLS = 50
TOOLS = [Tool(name="shell", description="Run a shell command",
              parameters={"type": "object", "properties": {"cmd": {"type": "string"}}}),
         Tool(name="read", description="Read a file",
              parameters={"type": "object", "properties": {"path": {"type": "string"}}})]


# --- building stores ---------------------------------------------------------------------------


def small_session(n: int, tag: int) -> list[Exchange]:
    system = [Text(text=f"You are agent {tag}. " + "Follow the house rules. " * 40)]
    history = [Message(role="user", content=[Text(text=f"task {tag}: fix the failing test")])]
    out = []
    for seq in range(1, n + 1):
        last = seq == n
        call = ToolCall(id=f"call_{tag}_{seq}", name="shell", arguments={"cmd": f"pytest -k {seq}"},
                        arguments_raw=f'{{"cmd":"pytest -k {seq}"}}')
        reply = [Text(text=f"Step {seq}: looking at the output of run {seq}.")]
        reply += [] if last else [call]
        out.append(Exchange(
            seq=seq, dialect="openai.chat", url="https://api.openai.com/v1/chat/completions",
            status=COMPLETE, http_status=200, started_at=1.7e9 + tag * 1e4 + seq,
            ended_at=1.7e9 + tag * 1e4 + seq + 0.5,
            request=Request(model="gpt-4.1", system=system, tools=TOOLS,
                            messages=list(history), stream=True),
            response=Response(model="gpt-4.1", content=reply, stop_reason="tool_calls",
                              usage=Usage(input_tokens=1000 + 40 * seq, output_tokens=30))))
        history += [Message(role="assistant", content=reply),
                    Message(role="tool", content=[ToolResult(tool_call_id=call.id, content=[
                        Text(text=f"== run {seq}: 3 passed, 1 failed ==\n" + "ok line\n" * 30)])])]
    side = dataclasses.replace(out[0], seq=n + 1, kind="side", response=Response(),
                               url="https://api.openai.com/v1/chat/completions")
    return [*out, side]


def claude_code_sessions(calls: int):
    """Decoded records of gen_session's wire bytes, one list per seed (made lazily)."""
    import gen_session

    from forge_record.decoders import dialect_named

    dialect = dialect_named("anthropic.messages")
    made: dict[int, list[Exchange]] = {}

    def session(seed: int) -> list[Exchange]:
        if seed not in made:
            exchanges = []
            for seq, c in enumerate(gen_session.calls(calls, seed=seed), 1):
                decoder = dialect.response_decoder("text/event-stream")
                decoder.feed(c.response)
                exchanges.append(Exchange(
                    seq=seq, dialect=dialect.name, url="https://api.anthropic.com" + c.path,
                    status=COMPLETE, http_status=200, started_at=1.7e9 + seq,
                    ended_at=1.7e9 + seq + 1, request=dialect.parse_request(c.request),
                    response=decoder.finish()))
            made[seed] = exchanges
        return made[seed]

    return session


def build(url: str, shape: str, exchanges: int) -> int:
    """Sessions of the shape until the store holds `exchanges`; the number written."""
    per = SMALL_CALLS + 1 if shape == "small" else 150
    maker = claude_code_sessions(150) if shape == "claude-code" else None
    written = 0
    with open_store(url) as store:
        for i in range(exchanges // per):
            session = small_session(SMALL_CALLS, i) if maker is None else maker(i % 8)
            sid = f"{i:016x}"
            session_row = Session(id=sid, harness="bench", started_at=1.7e9 + i * 1e4)
            # One transaction per session, as the recorder's writer batches.
            store.write([AddSession(session_row), *[AddExchange(sid, ex) for ex in session]])
            written += len(session)
    return written


# --- measuring -----------------------------------------------------------------------------------


def child(url: str, fmt: str) -> None:
    """Export the store to /dev/null; print one JSON line of measurements. After it (so the
    peak RSS is the export's), one pass that only reads every exchange and one that also runs
    lineage, to split the export's time into reading, lineage and the exporter's own work."""
    from forge_record import lineage
    from forge_record.exporters import export, exporter_class

    store = open_store(url)
    ids = [s["id"] for s in store.list_sessions(limit=None)]
    before = _high_water_kb()
    started = time.perf_counter()
    with open(os.devnull, "wb") as out:
        tally = export(store, fmt, out)
    took = time.perf_counter() - started
    peak = _high_water_kb()
    started = time.perf_counter()
    for i in ids:
        list(store.iter_exchanges(i))
    read_s = time.perf_counter() - started
    fingerprints = getattr(exporter_class(fmt), "fingerprints", True)  # as the export runs it
    started = time.perf_counter()
    for i in ids:
        lineage.analyze(list(store.iter_exchanges(i)), harness="bench", fingerprints=fingerprints)
    lineage_s = time.perf_counter() - started
    print(json.dumps({"seconds": took, "read_seconds": read_s, "lineage_seconds": lineage_s,
                      "lines": tally.exported, "rss_before_kb": before, "rss_peak_kb": peak}))


def _high_water_kb() -> int:
    """This process's peak RSS (VmHWM). Not ru_maxrss: on Linux that carries the parent's
    peak across fork and exec, and the parent here holds the sessions it just wrote."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measure(url: str, fmt: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", url, "--format", fmt],
                          capture_output=True, text=True, timeout=3000, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    args = parse_args()
    if args.child:
        child(args.child, args.format)
        return
    root = Path(args.keep or tempfile.mkdtemp(prefix="forge-export-bench-"))
    try:
        rows = run(root, args)
    finally:
        if not args.keep:  # the stores are tens of MB; --keep is for looking at them after
            shutil.rmtree(root, ignore_errors=True)
    report = {"shape": args.shape, "format": args.format, "python": sys.version.split()[0],
              "cpus": os.cpu_count(), "runs": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


def run(root: Path, args) -> list[dict]:
    """Build and export the N/4, N/2 and N stores under `root`; one row of figures each."""
    rows = []
    for n in (args.exchanges // 4, args.exchanges // 2, args.exchanges):
        url = default_store_url(root / f"{args.shape}-{n}")
        t = time.perf_counter()
        stored = build(url, args.shape, n)
        built = time.perf_counter() - t
        m = measure(url, args.format)
        rows.append({"exchanges": stored, "build_s": round(built, 1),
                     "export_s": round(m["seconds"], 2),
                     "exchanges_per_s": round(stored / m["seconds"]), "lines": m["lines"],
                     "read_only_per_s": round(stored / m["read_seconds"]),
                     "read_and_lineage_per_s": round(stored / m["lineage_seconds"]),
                     "rss_before_mb": round(m["rss_before_kb"] / 1024),
                     "rss_peak_mb": round(m["rss_peak_kb"] / 1024)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=["small", "claude-code"], default="small")
    p.add_argument("--exchanges", type=int, default=10_000)
    p.add_argument("--format", default="openai")
    p.add_argument("--json", help="write the report here")
    p.add_argument("--keep", help="build the stores in DIR (kept) instead of a temp dir")
    p.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    return p.parse_args()


if __name__ == "__main__":
    main()
