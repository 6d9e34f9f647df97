"""How long `forge-record run` takes to exit once its agent has, on a long growing session.

    python bench/run_exit.py [--calls 1000] [--kb 200] [--postgres] [--base DIR] [--json FILE]
    python bench/run_exit.py --cli [--calls 1000] [--window 125000] [--postgres] [--base DIR]

`forge-record run --mode reverse --harness generic` (through this script's --wrap, which is
the console script with timers added) records an agent (this script's --client) that
makes CALLS streamed Messages calls to bench/mock_server.py, with contexts growing from
0.75*KB to 1.25*KB (KB on average), each call's context the previous one, its answer (text
and a tool call) and a turn (the tool's result and a user text), as an agent sends it, into
a fresh SQLite store (with --postgres, a new database of the local Postgres). With --cli the
agent is the real Claude Code working through bench/cli_session.py's plan of CALLS main-loop
calls, compacting its conversation as if its model's context were WINDOW tokens (past ~360
KB at 125,000: ~210 KB on average), recorded as a user records it (`run -- claude ...`,
forward mode); this script's --exec runs it and stamps its exit. The agent writes the
CLOCK_MONOTONIC time it exits at; run's exit is taken when its process ends. The time
between is split into:
  drain    the agent's exit to the writer process closed (proxy stopped, the end sent, the
           writer's queue written and its counters back: WriterProcess.close); of it, the
           time to the proxy stopped is shown apart
  summary  the closing line (run._print_summary: today's store read-back, or not)
  rest     the interpreter's exit
and the writer process's CPU a call (run's children less the agent's own, over the exchanges
stored: side calls too) and its peak RSS (VmHWM when the close begins).
`--base DIR` runs the same against another revision (DIR: a `forge_record` package laid out
as installed, see bench/forge_proc.py), in the same run, rounds interleaved.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODEL = "bench-20-0-10"  # bench/mock_server.py: a short answer, back to back


def client(calls: int, kb: int, stamp: str) -> None:
    """The agent: CALLS calls with a growing context, then its exit time and its own CPU
    seconds to `stamp`."""
    base = os.environ["ANTHROPIC_BASE_URL"].rstrip("/")
    rng = random.Random(0)
    words = [f"w{rng.randrange(50_000)}" for _ in range(20_000)]

    def text(size: int) -> str:
        out, n = [], 0
        while n < size:
            w = rng.choice(words)
            out.append(w)
            n += len(w) + 1
        return " ".join(out)

    system = text(int(kb * 1024 * 0.75))
    turn = max(64, int(kb * 1024 * 0.5 / calls) // 2)
    messages: list[dict] = []
    results: list[dict] = []  # for the tool calls of the answer before
    for i in range(calls):
        messages.append({"role": "user", "content": [
            *results, {"type": "text", "text": f"step {i}: " + text(turn)}]})
        body = json.dumps({"model": MODEL, "max_tokens": 1024, "stream": True,
                           "system": system, "messages": messages}).encode()
        req = urllib.request.Request(base + "/v1/messages", body, method="POST", headers={
            "content-type": "application/json", "x-api-key": "sk-ant-dummy",
            "anthropic-version": "2023-06-01"})
        with urllib.request.urlopen(req, timeout=60) as r:
            answer = answer_of(r.read())
        messages.append({"role": "assistant", "content": answer})
        results = [{"type": "tool_result", "tool_use_id": b["id"], "content": text(turn)}
                   for b in answer if b["type"] == "tool_use"]
    Path(stamp).write_text(f"{time.monotonic()} {time.process_time()}")


def exec_agent(stamp: str, command: list[str]) -> int:
    """Run the agent `command`, then write its exit time and the CPU seconds it and this
    process spent to `stamp`; its exit code."""
    code = subprocess.run(command).returncode
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    Path(stamp).write_text(f"{time.monotonic()} "
                           f"{time.process_time() + used.ru_utime + used.ru_stime}")
    return code


def answer_of(stream: bytes) -> list[dict]:
    """The answer's content blocks from its Messages stream, as an agent puts them back into
    the history it sends next (what lets the recorder see one conversation going on)."""
    blocks: dict[int, dict] = {}
    inputs: dict[int, str] = {}
    for line in stream.splitlines():
        if not line.startswith(b"data: "):
            continue
        event = json.loads(line[6:])
        if event["type"] == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif event["type"] == "content_block_delta":
            delta, at = event["delta"], event["index"]
            if delta["type"] == "text_delta":
                blocks[at]["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                inputs[at] = inputs.get(at, "") + delta["partial_json"]
    for at, raw in inputs.items():
        blocks[at]["input"] = json.loads(raw)
    return [blocks[at] for at in sorted(blocks)]


def wrapped(argv: list[str]) -> None:
    """`forge-record ARGV`, with the writer's close and the closing line timed into the
    file $RUN_EXIT_TIMES (monotonic start and end of each)."""
    from forge_record import cli, writer_process
    from forge_record.addons import proxy
    from forge_record.commands import run

    times: dict[str, object] = {}

    def timed(name, fn):
        def inner(*a, **k):
            if name == "close":  # the writer process's peak so far; it is gone after
                times["writer_peak_mb"] = peak_mb(a[0]._proc.pid)
            start = time.monotonic()
            try:
                return fn(*a, **k)
            finally:
                times[name] = [start, time.monotonic()]
                if name == "close":  # the writer's counters (what went to a spool), and
                    # the CPU of run's children (the writer process and the agent) by then
                    times["counters"] = a[0].counters.to_dict()
                    used = resource.getrusage(resource.RUSAGE_CHILDREN)
                    times["children_cpu"] = used.ru_utime + used.ru_stime
                Path(os.environ["RUN_EXIT_TIMES"]).write_text(json.dumps(times))
        return inner

    proxy.InProcessProxy.stop = timed("stop", proxy.InProcessProxy.stop)
    writer_process.WriterProcess.close = timed("close", writer_process.WriterProcess.close)
    run._print_summary = timed("summary", run._print_summary)
    sys.argv = ["forge-record", *argv]
    cli.main()


def stored(url: str) -> int:
    """How many exchanges the store holds (the bench's store holds one session). Counted
    without opening it as a store: a `--base` revision's may be at an older schema revision,
    which this one refuses on Postgres."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM exchanges")).scalar_one()
    finally:
        engine.dispose()


def peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextlib.contextmanager
def recorded(calls: int, kb: int, mock_url: str, stamp: Path, window: int | None
             ) -> Iterator[tuple[list[str], list[str], dict[str, str], Path | None]]:
    """What run records: its options, the agent's command, environment and directory."""
    if window is None:
        yield (["--mode", "reverse", "--harness", "generic"],
               [sys.executable, __file__, "--client", "--calls", str(calls), "--kb", str(kb),
                "--stamp", str(stamp)], {"ANTHROPIC_BASE_URL": mock_url}, None)
        return
    import cli_session

    cli = cli_session.claude()
    if cli is None:
        raise SystemExit("Claude Code is not installed (scripts/test installs it with npm)")
    with cli_session.scripted(cli, 0, calls, window) as (_, options, command, env, work):
        yield (["--harness", "claude-code", *options],
               [sys.executable, __file__, "--exec", str(stamp), "--", *command], env, work)


def measure(calls: int, kb: int, mock_url: str, pythonpath: str | None,
            postgres: bool, window: int | None = None) -> dict:
    from common import bench_store

    with tempfile.TemporaryDirectory() as tmp, bench_store(tmp, postgres) as (url, _):
        stamp, times = Path(tmp, "agent_exit"), Path(tmp, "times.json")
        with recorded(calls, kb, mock_url, stamp, window) as (options, command, agent_env,
                                                              cwd):
            env = {**os.environ, **agent_env, "RUN_EXIT_TIMES": str(times),
                   "FORGE_RECORD_HOME": str(Path(tmp, "home"))}
            if pythonpath:
                env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
            argv = [sys.executable, __file__, "--wrap", "run", "--store", url, *options, "--",
                    *command]
            started = time.monotonic()
            done = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=7200)
            ended = time.monotonic()
        if done.returncode != 0 or not stamp.exists():
            raise SystemExit(f"run failed ({done.returncode}): {done.stderr[-2000:]}")
        agent, agent_cpu = map(float, stamp.read_text().split())
        t = json.loads(times.read_text())
        closing = [line for line in done.stderr.splitlines() if " model call" in line]
        calls = stored(url)  # side calls too: the writer handles every exchange
        return {"agent_s": agent - started, "exit_s": ended - agent,
                "drain_s": t["close"][1] - agent, "stop_s": t["stop"][1] - agent,
                "summary_s": t["summary"][1] - t["summary"][0],
                "rest_s": ended - t["summary"][1], "closing": closing[-1] if closing else "",
                "writer_ms": (t["children_cpu"] - agent_cpu) / calls * 1e3,
                "writer_peak_mb": t["writer_peak_mb"],
                "to_spool": t["counters"]["overflowed"] + t["counters"]["spooled"]}


def main() -> None:
    if sys.argv[1:2] == ["--wrap"]:
        return wrapped(sys.argv[2:])
    if sys.argv[1:2] == ["--exec"]:  # --exec STAMP -- COMMAND...
        sys.exit(exec_agent(sys.argv[2], sys.argv[4:]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", action="store_true")
    ap.add_argument("--stamp")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--kb", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--cli", action="store_true",
                    help="the agent is the real Claude Code (bench/cli_session.py's plan)")
    ap.add_argument("--window", type=int, default=125_000,
                    help="with --cli: the context, in tokens, it compacts for")
    ap.add_argument("--postgres", action="store_true", help="a new Postgres database each run")
    ap.add_argument("--base", help="another revision's forge_record package dir")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.client:
        return client(args.calls, args.kb, args.stamp)
    from common import Children, start_mock

    variants = {"this": None, **({"base": args.base} if args.base else {})}
    results: dict[str, list[dict]] = {name: [] for name in variants}
    with Children() as children:
        # the bench's agent talks to bench/mock_server.py; the real CLI to its own scripted mock
        mock_url = "" if args.cli else start_mock(children)[1]
        for _ in range(args.rounds):
            for name, path in variants.items():
                r = measure(args.calls, args.kb, mock_url, path, args.postgres,
                            args.window if args.cli else None)
                results[name].append(r)
                print(f"{name}: agent {r['agent_s']:.1f} s; run exits {r['exit_s']:.2f} s after "
                      f"it: drain {r['drain_s']:.2f} (proxy stopped after {r['stop_s']:.2f}), "
                      f"summary {r['summary_s']:.2f}, rest {r['rest_s']:.2f}; writer "
                      f"{r['writer_ms']:.1f} ms of CPU a call, peak RSS "
                      f"{r['writer_peak_mb']:.0f} MB, {r['to_spool']} calls went to a spool"
                      f"\n  {r['closing']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
