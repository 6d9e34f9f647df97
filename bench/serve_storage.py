"""What `serve` past its encoders' budget stores, this checkout against another revision in one
run.

    python bench/serve_storage.py [--sessions 40] [--calls 60] [--encoders 8] [--rounds 2]
                                  [--base DIR] [--json FILE]

`--sessions` generated sessions of one harness version and project (bench/gen_session.py, as
bench/storage.py's team), finalized as the writer process does, then written call by call,
interleaved, by one Store whose writer holds `--encoders` encoders (store.batch._ENCODERS):
as a `serve` replica writes more rollouts at once than its budget holds, every call a segment
resumed from its session's tail, its new content packed into the writer's shared stream. The
sessions end, the store closes, and a fresh Postgres database is measured after VACUUM FULL
(freed space is not counted: a store in use gives it to the next rows): bytes a session and
the ratio to the raw bodies, pack groups and their packs, segments sealed, the writer's own
CPU a call (not the server's) and the CPU its close took. `--base DIR` runs the same child with
DIR first on sys.path (a `forge_record` package laid out as installed, as bench/storage.py's
`--baseline` makes), rounds interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(sessions: int, calls: int, encoders: int) -> None:
    sys.path.insert(1, str(HERE))
    import sqlalchemy as sa
    import storage  # bench/storage.py: generated sessions, sizes
    from common import postgres_database

    from forge_record.finalize import finalize
    from forge_record.records import Session
    from forge_record.store import batch, open_store
    from forge_record.store.items import AddExchange, AddSession, EndSession

    batch._ENCODERS = encoders
    sent = {storage.run_id(f"serve-{n}"): [
        finalize(storage._copy(ex), storage.REDACTOR)
        for ex in storage.exchanges(calls, n, storage.TEAM_HARNESS)[0]] for n in range(sessions)}
    with postgres_database(f"bench_serve_storage_{os.getpid()}") as (url, _):
        with open_store(url) as store:
            store.write([AddSession(Session(id=sid, harness="claude-code", started_at=1.76e9))
                         for sid in sent])
            start = time.process_time()
            for at in range(calls):
                for sid, exchanges in sent.items():
                    store.write([AddExchange(sid, exchanges[at])])
            store.write([EndSession(sid, 1.76e9 + 3600, 0) for sid in sent])
            write = time.process_time() - start
            start = time.process_time()
        close = time.process_time() - start
        with open_store(url) as store:
            with store._engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").execute(
                    sa.text("VACUUM FULL"))
            size = storage.postgres_size(store, every=True)
            with store.reading("measure") as conn:
                groups = conn.execute(sa.text(
                    "SELECT count(*) FROM packs GROUP BY group_id")).scalars().all()
                first_rows = conn.execute(sa.text(
                    "SELECT record FROM exchanges WHERE piece = 0")).scalars().all()
    raw = sum(storage._raw(exchanges) for exchanges in sent.values())
    print(json.dumps({
        "kb_a_session": size / sessions / 1e3, "ratio": raw / size,
        "groups": len(groups), "packs": sum(groups), "segments": len(first_rows),
        "segments_sealed": sum(bytes(r[:1]) == b"S" for r in first_rows),
        "writer_ms_a_call": write / (sessions * calls) * 1e3, "close_s": close}))


def measure(args: argparse.Namespace, base: str | None) -> dict:
    env = dict(os.environ)
    if base:
        env["PYTHONPATH"] = base + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, __file__, "--child", "--sessions", str(args.sessions),
                           "--calls", str(args.calls), "--encoders", str(args.encoders)],
                          capture_output=True, text=True, env=env, timeout=1800, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=40)
    p.add_argument("--calls", type=int, default=60)
    p.add_argument("--encoders", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--base", help="a package dir of the revision to compare with")
    p.add_argument("--json")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.sessions, args.calls, args.encoders)
        return
    variants = {"this": None, **({"base": args.base} if args.base else {})}
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for name, path in variants.items():
            runs[name].append(measure(args, path))
            print(name, json.dumps(runs[name][-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
