"""The store writer's CPU per call on one growing Claude Code session, this checkout against
another revision in one run.

    python bench/writer_session.py [--calls 150] [--compact-kb KB] [--rounds 3] [--batch 8]
                                  [--postgres] [--cli [--window TOKENS]] [--base DIR]
                                  [--json FILE]

bench/gen_session.py's session (15 KB system prompt, 20 KB of tools, a subagent and title
calls; request bodies grow from ~50 KB to ~540 KB, ~280 KB on average at 150 calls; with
`--calls 1000 --compact-kb 360` the conversation is compacted past 360 KB, ~200 KB on
average), or with `--cli` a real Claude Code session recorded by bench/cli_session.py (150
main-loop calls and a sub-agent's 8: 77 KB to ~480 KB, ~265 KB on average; with `--calls
1000 --window 125000` the CLI compacts its conversation past ~360 KB, ~210 KB on average),
as the addon hands it over (request not parsed yet). A child process per measurement does to it what
`forge-record run`'s writer process does (finalize.finalize with a body redactor, then
Store.write in transactions of --batch exchanges, into a fresh SQLite file, then the session's
end, which seals its last pack group: store.seal) and reports the
process CPU time per call (time.process_time, which other processes on a busy machine do not
add to), split into finalize and store. `--postgres` writes into a new database of the
local Postgres instead, and adds to the store's figure the CPU its server processes spent
meanwhile (their /proc times: the writer's work there is planning and executing its
statements, a cost SQLite pays in-process). `--base DIR` runs the same child with DIR first
on sys.path (a `forge_record` package laid out as installed: see bench/forge_proc.py),
rounds interleaved, so both see the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(calls: int, batch: int, compact_kb: int | None, postgres: bool, cli: bool,
          window: int | None) -> None:
    sys.path.insert(1, str(HERE))
    import storage  # bench/storage.py: the captured exchanges
    from common import bench_store

    from forge_record.finalize import finalize
    from forge_record.records import Session
    from forge_record.store import open_store
    from forge_record.store.items import AddExchange, AddSession, EndSession

    if cli:
        import cli_session

        sent = storage.captured(cli_session.sessions(1, calls, window)[0], 0)
    else:
        sent, _ = storage.exchanges(calls, 0, compact_kb=compact_kb)
    with tempfile.TemporaryDirectory() as d, bench_store(d, postgres) as (url, server_cpu), \
            open_store(url) as store:
        store.write([AddSession(Session(id="w", harness="claude-code", started_at=1.76e9))])
        parse = write = 0.0
        served = server_cpu()
        for start in range(0, len(sent), batch):
            c0 = time.process_time()
            done = [finalize(storage._copy(ex), storage.REDACTOR)
                    for ex in sent[start:start + batch]]
            c1 = time.process_time()
            store.write([AddExchange("w", ex) for ex in done])
            c2 = time.process_time()
            parse, write = parse + c1 - c0, write + c2 - c1
        c0 = time.process_time()
        store.write([EndSession("w", 1.76e9 + 3600, 0)])  # its end seals its last pack group
        write += time.process_time() - c0
        server = server_cpu() - served
    print(json.dumps({"finalize_ms": parse / len(sent) * 1e3,
                      "store_ms": (write + server) / len(sent) * 1e3,
                      "server_ms": server / len(sent) * 1e3,
                      "kb": sum(len(e.raw_request) for e in sent) / len(sent) / 1e3}))


def measure(calls: int, batch: int, compact_kb: int | None, postgres: bool, cli: bool,
            window: int | None, base: str | None) -> dict:
    env = dict(os.environ)
    if base:
        env["PYTHONPATH"] = base + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, __file__, "--child", "--calls", str(calls),
                           "--batch", str(batch), *(["--compact-kb", str(compact_kb)]
                                                    if compact_kb else []),
                           *(["--postgres"] if postgres else []), *(["--cli"] if cli else []),
                           *(["--window", str(window)] if window else [])],
                          capture_output=True, text=True, env=env,
                          timeout=1800, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=150)
    p.add_argument("--compact-kb", type=int, help="compact the conversation past this size")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--postgres", action="store_true",
                   help="write into a new database of the local Postgres, not SQLite")
    p.add_argument("--cli", action="store_true",
                   help="a recorded real Claude Code session instead (bench/cli_session.py)")
    p.add_argument("--window", type=int,
                   help="with --cli: the CLI compacts as if its model's context were this many "
                        "tokens (bench/cli_session.py)")
    p.add_argument("--base", help="a package dir of the revision to compare with")
    p.add_argument("--json")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.calls, args.batch, args.compact_kb, args.postgres, args.cli, args.window)
        return
    variants = {"this": None, **({"base": args.base} if args.base else {})}
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for name, path in variants.items():
            runs[name].append(measure(args.calls, args.batch, args.compact_kb,
                                          args.postgres, args.cli, args.window, path))
            print(name, json.dumps(runs[name][-1]), flush=True)
    summary = {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
               for name, rows in runs.items()}
    for row in summary.values():
        row["all_ms"] = row["finalize_ms"] + row["store_ms"]
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
