"""The store at scale: `sessions`, `show`, `export` and `gc` on stores of 10k, 100k and 1M
exchanges, wall time and peak memory of each.

    python bench/scale.py [--sizes 10000,100000,1000000] [--store sqlite|postgres|both]
                          [--templates 100] [--base DIR] [--json FILE]

How the store is made (fast, bounded): `--templates` distinct sessions of 100 exchanges
(bench/export.py's small shape: 99 model calls and a side call, each session its own content)
are written once with the Store API into a template store. Their rows (sessions, exchanges,
blobs, packs) are then copied as stored into the measured store, one *round* of copies at a
time with new session ids and start times, until it holds the size asked for; the measured
store grows from one size to the next. So every copy names the same blobs as its template:
the exchanges table scales, the blob and pack tables do not (docs/BENCHMARKS.md says what that
leaves out). A copy carries its template's kept pack groups (`sessions.pack_groups`, which the
writer keeps), as a session the writer wrote would; no `lineage` is kept yet. Postgres runs in
a database this bench creates and drops.

Sessions start one minute apart, newest first in copy order; each carries the tags
`round=<copy round>` (100 sessions with 100 templates) and `team=t<template % 10>`. Measured,
each in a fresh child process (`--child`) reporting wall time and peak RSS (VmHWM):
- sessions: `-n 20`; `--harness bench -n 20`; `--tag round=0 -n 20`; `--since` the last hour;
- show: one session (`last`), `--json`;
- export: `--format openai --tag round=0` (one round: 100 sessions, 10,000 exchanges);
- gc: `--dry-run`, then for real, deleting the 10 oldest sessions.
"""

from __future__ import annotations

import argparse
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

import sqlalchemy as sa  # noqa: E402
from common import postgres_database  # noqa: E402

from forge_record.records import Session  # noqa: E402
from forge_record.store import open_store  # noqa: E402
from forge_record.store.items import AddExchange, AddSession, EndSession  # noqa: E402
from forge_record.store.schema import blobs, exchanges, packs, sessions  # noqa: E402

PER_SESSION = 100  # 99 model calls and a side call
BASE = 1.7e9


# --- building ----------------------------------------------------------------------------------


def build_templates(url: str, count: int) -> None:
    from export import small_session

    with open_store(url) as store:
        for t in range(count):
            sid = f"{t:08x}"
            row = Session(id=sid, harness="bench", started_at=BASE)
            # Ended, as the sessions of a store at scale are: their writer seals them.
            store.write([AddSession(row), *[AddExchange(sid, ex)
                                           for ex in small_session(PER_SESSION - 1, t)],
                         EndSession(sid, BASE + 60, 0)])


class Templates:
    """The template store's rows, held in memory to be copied round after round."""

    def __init__(self, url: str) -> None:
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            self.sessions = [dict(r) for r in conn.execute(sa.select(sessions)).mappings()]
            cols = [c for c in exchanges.c if c.name != "id"]
            self.exchanges = [dict(r) for r in conn.execute(sa.select(*cols)).mappings()]
            self.blobs = [dict(r) for r in conn.execute(sa.select(blobs)).mappings()]
            self.packs = [dict(r) for r in conn.execute(sa.select(packs)).mappings()]
        engine.dispose()

    def copy_shared(self, conn: sa.Connection) -> None:
        conn.execute(packs.insert(), self.packs)
        conn.execute(blobs.insert(), self.blobs)

    def copy_round(self, conn: sa.Connection, n: int) -> None:
        """Round n: every template session again, ids and start times of their own. Round 0's
        exchanges come from here; later rounds copy round 0's inside the database
        (INSERT ... SELECT), so a million rows never pass through Python."""
        count = len(self.sessions)
        # Each copy carries its template's pack groups as the writer kept them (the same
        # exchanges, naming the same blobs); `lineage` is left for `sessions` to compute.
        rows = []
        for t, s in enumerate(self.sessions):
            started = BASE - (n * count + t) * 60.0
            rows.append({**s, "id": _copy_id(n, s["id"]), "started_at": started,
                         "ended_at": started + 50, "lineage": None,
                         "tags": {"round": str(n), "team": f"t{t % 10}"}})
        conn.execute(sessions.insert(), rows)
        if n == 0:
            conn.execute(exchanges.insert(), [{**e, "session_id": _copy_id(0, e["session_id"])}
                                              for e in self.exchanges])
            return
        cols = [c for c in exchanges.c if c.name != "id"]
        prefix = sa.literal(f"{n:08x}") + sa.func.substr(exchanges.c.session_id, 9)
        source = sa.select(*[prefix if c.name == "session_id" else c for c in cols]).where(
            exchanges.c.session_id.in_([_copy_id(0, s["id"]) for s in self.sessions]))
        conn.execute(exchanges.insert().from_select([c.name for c in cols], source))


def _copy_id(n: int, template_id: str) -> str:
    return f"{n:08x}{template_id}"


def grow(url: str, templates: Templates, rounds: range) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        if rounds.start == 0:
            templates.copy_shared(conn)
    for n in rounds:
        with engine.begin() as conn:
            templates.copy_round(conn, n)
    engine.dispose()


# --- measuring ---------------------------------------------------------------------------------


def child(url: str, args: list[str]) -> None:
    """Run one forge-record command, its output to /dev/null; print wall time and peak RSS."""
    from forge_record.cli import cli

    before = _high_water_kb()
    started = time.perf_counter()
    with open(os.devnull, "w") as null:
        saved = os.dup(1)
        os.dup2(null.fileno(), 1)
        try:
            cli.main([*args, "--store", url], standalone_mode=False)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
    took = time.perf_counter() - started
    print(json.dumps({"seconds": took, "rss_before_kb": before, "rss_peak_kb": _high_water_kb()}))


def _high_water_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measure(url: str, args: list[str], base: str | None = None) -> dict:
    env = dict(os.environ)
    if base:  # another revision's forge_record package first on sys.path
        env["PYTHONPATH"] = base + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, __file__, "--child", url, "--", *args],
                          capture_output=True, text=True, timeout=3600, env=env)
    if done.returncode:  # e.g. an option the revision measured does not have
        print(f"{args} failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
        return {"seconds": float("nan"), "rss_before_kb": 0, "rss_peak_kb": 0}
    return json.loads(done.stdout.strip().splitlines()[-1])


def commands(url: str, now: float) -> list[tuple[str, list[str]]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        oldest = conn.scalars(sa.select(sessions.c.started_at).order_by(sessions.c.started_at)
                              .limit(11)).all()
    engine.dispose()
    age = f"{now - oldest[-1] - 1:.0f}s"  # the 10 oldest sessions, not the 11th
    newest_hour = str(BASE - 3600)
    return [
        ("sessions -n 20", ["sessions", "-n", "20", "--json"]),
        ("sessions -n 20, again", ["sessions", "-n", "20", "--json"]),
        ("sessions --harness bench", ["sessions", "--harness", "bench", "-n", "20", "--json"]),
        ("sessions --tag round=0", ["sessions", "--tag", "round=0", "-n", "20", "--json"]),
        ("sessions --since 1h", ["sessions", "--since", newest_hour, "-n", "20", "--json"]),
        ("show last", ["show", "last", "--json"]),
        ("export --tag round=0", ["export", "-f", "openai", "--tag", "round=0", "-o",
                                  os.devnull]),
        ("gc --dry-run", ["gc", "--older-than", age, "--dry-run"]),
        ("gc (10 oldest)", ["gc", "--older-than", age]),
    ]


def run(url: str, sizes: list[int], templates: Templates, label: str,
        base: str | None = None, base_upto: int = 0) -> list[dict]:
    per_round = len(templates.exchanges)
    rows, done = [], 0
    for size in sizes:
        rounds = max(1, size // per_round)
        t = time.perf_counter()
        grow(url, templates, range(done, rounds))
        built = time.perf_counter() - t
        done = rounds
        now = time.time()
        todo = commands(url, now)
        where = {"store": label, "exchanges": rounds * per_round, "build_s": round(built, 1)}
        if base and rounds * per_round <= base_upto:
            # The other revision first, on the store taken back to its schema (0005: the
            # kept columns dropped), its gc only dry (a real one would leave ours nothing).
            _schema(url, "0005")
            for name, args in todo:
                if "--dry-run" in args or args[0] != "gc":
                    rows.append(_measured(url, where, "base", base, name, args))
            _schema(url, "head")
        for name, args in todo:
            rows.append(_measured(url, where, "this", None, name, args))
    return rows


def _measured(url: str, where: dict, revision: str, path: str | None, name: str,
              args: list[str]) -> dict:
    m = measure(url, args, path)
    row = {**where, "revision": revision, "command": name, "seconds": round(m["seconds"], 3),
           "rss_mb": round(m["rss_peak_kb"] / 1024),
           "rss_before_mb": round(m["rss_before_kb"] / 1024)}
    print(json.dumps(row), flush=True)
    return row


def _schema(url: str, revision: str) -> None:
    from forge_record.store import migrate
    from forge_record.store.engine import make_engine

    engine = make_engine(url)
    try:
        if revision == "head":
            migrate.upgrade(engine)
        else:
            migrate.downgrade(engine, revision)
    finally:
        engine.dispose()


def main() -> None:
    args = parse_args()
    if args.child:
        child(args.child, args.rest)
        return
    root = Path(tempfile.mkdtemp(prefix="forge-scale-bench-"))
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    try:
        template_url = f"sqlite:///{root / 'templates.db'}"
        t = time.perf_counter()
        build_templates(template_url, args.templates)
        print(f"templates: {args.templates} sessions in {time.perf_counter() - t:.1f}s",
              flush=True)
        templates = Templates(template_url)
        if args.store in ("sqlite", "both"):
            url = f"sqlite:///{root / 'scale.db'}"
            open_store(url).close()  # the schema
            rows += run(url, sizes, templates, "sqlite", args.base, args.base_upto)
        if args.store in ("postgres", "both"):
            with postgres_database(f"forge_scale_{os.getpid()}") as (url, _):
                open_store(url).close()
                rows += run(url, sizes, templates, "postgres", args.base, args.base_upto)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"python": sys.version.split()[0],
                                               "cpus": os.cpu_count(), "runs": rows}, indent=2))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    p.add_argument("--templates", type=int, default=100)
    p.add_argument("--base", metavar="DIR", help="also run each command with DIR first on "
                   "sys.path: another revision's package (see bench/forge_proc.py)")
    p.add_argument("--base-upto", type=int, default=10**9, metavar="N",
                   help="with --base, measure the other revision only at sizes up to N")
    p.add_argument("--json", help="write the report here")
    p.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    return p.parse_args()


if __name__ == "__main__":
    main()
