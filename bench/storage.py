"""Storage benchmark: how small a realistic agent session gets in the store, what recording
costs per exchange, and how fast any exchange reads back.

    .venv/bin/python bench/storage.py [--calls 150] [--sessions 3] [--store URL]
                                      [--team 20] [--cli N] [--codex N] [--gemini N]
                                      [--codex-http N] [--qwen N] [--opencode N]
                                      [--baseline REV] [--on-disk [--xz]]

The session is bench/gen_session.py's synthetic Claude Code loop (a ~15 KB system prompt,
~20 KB of tools, file contents and command output in tool results, a moving cache_control
marker, a sub-agent and title calls), decoded by the real Anthropic decoder. Printed:

1. options on the same bytes, no database: zstd-3 per body (what layout 1 stored), the whole
   session as one zstd-3 stream (an upper bound with no random access), and raw request
   bodies compressed against their parent's body alone, against the parent and the
   normalized blobs (what the store does), and with keyframes every 16 / 32 / 64;
2. the store: every exchange written with Store.add_exchange exactly as the writer thread
   does, after finalize.finalize has redacted the bodies and parsed the request (timed apart,
   ms per exchange), as `forge-record run` does by default; payload
   bytes by part; the ratio vs raw for records alone and with raw bodies reproducible; the
   SQLite file per session once `--sessions` sessions (different seeds) share the store;
3. reading: every exchange checked equal to what was written (raw bodies byte for byte), a
   whole-session read, and random access to single exchanges;
4. on disk (issue 21's figures; `--on-disk` alone): one session in a fresh SQLite file,
   `--team` sessions of one harness version in a fresh Postgres, vacuumed after each as
   autovacuum does in a store in use (vacuum()), one more written a segment a call; with
   `--cli N` the first two on N recorded real Claude Code sessions too (bench/cli_session.py,
   also vacuumed after each), with `--codex N` on N recorded real Codex sessions over its
   WebSocket (bench/codex_session.py), with `--gemini N` on N recorded real Gemini CLI
   sessions (bench/gemini_session.py), with `--codex-http N` on N recorded real Codex
   sessions over HTTP, with `--qwen N` on N recorded real Qwen Code sessions over Chat
   Completions (bench/qwen_session.py), with `--opencode N` on N recorded real opencode
   sessions over Anthropic Messages (bench/opencode_session.py); with `--baseline REV` at REV
   as well, in the same run. Each figure comes with references (`_stream_ratio`): the same
   sessions' raw bodies as one zstd-22 stream over all of them, and with `--xz` as one xz -9e
   stream, what the content allows with no random access and nothing else kept
   (references()). Sessions are written under ids shaped as `run` makes them.
Speed figures are what this machine measured; nothing here asserts them.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_session  # noqa: E402
from common import postgres_database  # noqa: E402

from forge_record.decoders import anthropic_messages  # noqa: E402
from forge_record.finalize import finalize  # noqa: E402
from forge_record.records import Exchange, Session  # noqa: E402
from forge_record.redact.bodies import Redactor  # noqa: E402
from forge_record.redact.headers import redact_headers  # noqa: E402
from forge_record.store import Writer, content, delta, open_store, segments  # noqa: E402
from forge_record.store.segments import request_hint  # noqa: E402

MB = 1e6
# What `forge-record run` does by default: redact the bodies (one redactor for the session).
REDACTOR = Redactor(b"bench-storage-key")


def exchanges(calls: int, seed: int, harness: int | None = None,
              compact_kb: int | None = None) -> tuple[list[Exchange], list[str]]:
    """Captured exchanges (request not parsed yet, as the addon hands them over), and each
    call's chain name. Sessions with the same `harness` seed share a harness version and a
    project (gen_session)."""
    made = gen_session.calls(calls, seed, harness_seed=harness, compact_kb=compact_kb)
    return captured(made, seed), [call.chain for call in made]


def captured(calls: list[gen_session.Call], seed: int) -> list[Exchange]:
    """The calls as the addon hands them over: request not parsed yet, response decoded,
    headers without credentials (a recording's, else a few fixed ones)."""
    dialect = anthropic_messages.DIALECT
    out = []
    for seq, call in enumerate(calls, 1):
        decoder = dialect.response_decoder("text/event-stream")
        decoder.feed(call.response)
        out.append(Exchange(
            seq=seq, dialect=dialect.name, url="https://api.anthropic.com" + call.path,
            http_status=200, started_at=1.76e9 + 7 * seq, first_byte_at=1.76e9 + 7 * seq + 1,
            ended_at=1.76e9 + 7 * seq + 5, response=decoder.finish(),
            request_headers=redact_headers((call.request_headers or {
                "user-agent": "claude-cli/2.1.197 (external, cli)",
                "anthropic-version": "2023-06-01", "content-type": "application/json",
                "anthropic-beta": "claude-code-20250219"}).items()),
            response_headers=redact_headers((call.response_headers or {
                "request-id": f"req_011{seed:04d}{seq:06d}",
                "content-type": "text/event-stream; charset=utf-8"}).items()),
            raw_request=call.request, raw_response=call.response))
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def times(label: str, ms: list[float]) -> str:
    return (f"  {label:<34} mean {statistics.mean(ms):6.2f}  p50 {pct(ms, .5):6.2f}  "
            f"p95 {pct(ms, .95):6.2f}  max {max(ms):6.2f} ms")


# --- 1. options on the same bytes ---------------------------------------------------------


def options(sent: list[Exchange], chains: list[str], raw: int) -> None:
    z = zstandard.ZstdCompressor(level=3)
    per_body = sum(len(z.compress(b)) for e in sent for b in (e.raw_request, e.raw_response) if b)
    stream = len(z.compress(b"".join(e.raw_request + e.raw_response for e in sent)))
    print("1. options on the same bytes (no database)")
    print(f"  zstd-3 per body (layout 1)          {per_body / MB:8.2f} MB  {raw / per_body:6.0f}x")
    print(f"  one zstd-3 stream, no random access {stream / MB:8.2f} MB  {raw / stream:6.0f}x")
    requests = [finalize(_copy(e)).request for e in sent]
    each = sum(len(z.compress(e.raw_request)) for e in sent)
    print(f"  raw requests, zstd-3 each (layout 1) {each / 1e3:9.1f} KB")
    for every, hinted in ((32, False), (16, True), (32, True), (64, True)):
        size = _raw_deltas(sent, chains, requests, every, hinted)
        what = "parent + normalized blobs" if hinted else "parent's body only"
        print(f"  raw requests vs {what:<26} keyframe every {every:>2}: {size / 1e3:7.1f} KB")


def _copy(ex: Exchange) -> Exchange:
    return dataclasses.replace(ex, flags=list(ex.flags))


def _raw_deltas(sent, chains, requests, every: int, hinted: bool) -> int:
    """Raw request bytes when each body is a delta against the previous body of its chain."""
    last: dict[str, tuple[int, int]] = {}  # chain -> (index, depth)
    total = 0
    for i, (ex, chain, req) in enumerate(zip(sent, chains, requests, strict=True)):
        parent = last.get(chain)
        keyframe = parent is None or parent[1] + 1 >= every
        blobs = [content.message_blob(m) for m in req.messages]
        if keyframe:
            hint = request_hint([content.system_blob(req), content.tools_blob(req.tools),
                                 content.parameters_blob(req.parameters)], blobs) if hinted else b""
            frame = delta.encode(ex.raw_request, None, hint)
            last[chain] = (i, 0)
        else:
            kept = len(requests[parent[0]].messages)
            hint = request_hint([], blobs[kept:]) if hinted else b""
            frame = delta.encode(ex.raw_request, sent[parent[0]].raw_request, hint)
            last[chain] = (i, parent[1] + 1)
        total += len(frame)
    return total


# --- 2. the store ------------------------------------------------------------------------


def record(store, session_id: str, sent: list[Exchange]) -> dict[str, list[float]]:
    """Write the session as the writer thread does. Per exchange, in ms: wall and CPU time
    (this thread's, which other processes on a busy machine do not inflate) of parsing the
    request, and of encoding, compressing and committing it."""
    store.add_session(Session(id=session_id, harness="claude-code", started_at=1.76e9))
    out: dict[str, list[float]] = {k: [] for k in ("parse", "write", "parse cpu", "write cpu")}
    for ex in sent:
        ex = _copy(ex)
        t0, c0 = time.perf_counter(), time.thread_time()
        ex = finalize(ex, REDACTOR)
        t1, c1 = time.perf_counter(), time.thread_time()
        store.add_exchange(session_id, ex)
        t2, c2 = time.perf_counter(), time.thread_time()
        for key, value in (("parse", t1 - t0), ("write", t2 - t1), ("parse cpu", c1 - c0),
                           ("write cpu", c2 - c1)):
            out[key].append(value * 1e3)
    store.end_session(session_id, 1.76e9 + 3600, 0)
    return out


def payload(store, session_id: str) -> dict[str, int]:
    """Stored bytes by part, for a store holding only this session's content."""
    import sqlalchemy as sa

    with store.reading("measure") as conn:
        one = conn.execute(sa.text(
            "SELECT sum(length(record)), sum(length(raw_request)), sum(length(raw_response)) "
            "FROM exchanges WHERE session_id = :s"), {"s": session_id}).one()
        packs = conn.scalar(sa.text("SELECT sum(length(data)) FROM packs"))
        keys = conn.scalar(sa.text("SELECT sum(length(hash)) + 24 * count(*) FROM blobs"))
        summary = conn.scalar(sa.text(
            "SELECT sum(length(dialect) + length(kind) + length(coalesce(model, '')) + "
            "length(status) + length(CAST(flags AS TEXT)) + 64) "
            "FROM exchanges"))
    return {"manifests": one[0], "packs": packs, "blob keys and locations": keys,
            "summary columns": summary, "raw requests": one[1], "raw responses": one[2]}


# Every table of the store (a database of its own), as regclass.
TABLES = ("SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
          "WHERE n.nspname = 'public' AND c.relkind = 'r'")


def postgres_size(store, every: bool = False) -> int:
    """Sessions, exchanges, blobs and packs, or `every` table of the store, each with its
    indexes, TOAST and map forks."""
    import sqlalchemy as sa

    tables = TABLES if every else (
        "SELECT t::regclass FROM unnest(ARRAY['sessions', 'exchanges', 'blobs', 'packs']) t")
    with store.reading("measure") as conn:
        return int(conn.scalar(sa.text(
            f"SELECT sum(pg_total_relation_size(oid)) FROM ({tables}) AS r(oid)")))


def submit_cost(url: str, sent: list[Exchange], spool: Path) -> list[float]:
    """What the proxy's event loop pays per exchange: Writer.submit_exchange."""
    writer = Writer(open_store(url), prepare=lambda _sid, ex: finalize(ex), spool_dir=spool)
    writer.submit_session(Session(id="submit-cost"))
    out = []
    for ex in sent:
        ex = _copy(ex)
        t0 = time.perf_counter()
        writer.submit_exchange("submit-cost", ex)
        out.append((time.perf_counter() - t0) * 1e6)
    writer.close()
    return out


# --- 3. reading --------------------------------------------------------------------------


def reading(store, session_id: str, sent: list[Exchange]) -> None:
    t0 = time.perf_counter()
    back = list(store.iter_exchanges(session_id, raw=True))
    whole_raw = time.perf_counter() - t0
    t0 = time.perf_counter()
    list(store.iter_exchanges(session_id))
    whole = time.perf_counter() - t0
    wanted = [finalize(_copy(e), REDACTOR) for e in sent]
    exact = sum(a == b for a, b in zip(back, wanted, strict=True))
    print(f"  round trip: {exact}/{len(sent)} exchanges equal, raw bodies byte for byte")
    assert exact == len(sent), "a record did not read back equal"
    print(f"  whole session: {whole * 1e3:.0f} ms records only, {whole_raw * 1e3:.0f} ms "
          "with raw bodies")
    rng = random.Random(1)
    picks = rng.sample(range(1, len(sent) + 1), min(20, len(sent)))
    for raw in (False, True):
        ms = []
        for seq in picks:
            t0 = time.perf_counter()
            got = store.get_exchange(session_id, seq, raw=raw)
            ms.append((time.perf_counter() - t0) * 1e3)
            assert got.seq == seq
        print(times("one exchange at random" + (", raw too" if raw else ""), ms))


def disk(sessions: int, calls: int, raw: int, tmp: Path) -> None:
    url = f"sqlite:///{tmp / 'disk.db'}"
    with open_store(url) as store:
        for seed in range(sessions):
            record(store, run_id(f"s{seed}"), exchanges(calls, seed)[0])
    import sqlite3

    with sqlite3.connect(tmp / "disk.db") as conn:
        conn.execute("VACUUM")
    size = os.path.getsize(tmp / "disk.db")
    print(f"  SQLite file, {sessions} sessions (seeds 0..{sessions - 1}): {size / MB:.2f} MB, "
          f"{size / sessions / 1e3:.0f} KB a session: {raw * sessions / size:.0f}x")


# --- 4. on disk, against another revision -----------------------------------------------

TEAM_HARNESS = 1000  # gen_session harness_seed shared by the team's sessions


# The benches of other real CLIs: an option's name, and the bench/ module whose
# sessions(count, calls, **keywords) records them; `recorded` names their session counts.
RECORDED = {"codex": ("codex_session", {}), "codex_http": ("codex_session", {"http": True}),
            "gemini": ("gemini_session", {}), "qwen": ("qwen_session", {}),
            "opencode": ("opencode_session", {})}


def disk_figures(calls: int, team: int, tmp: Path, cli: int = 0,
                 recorded: dict[str, int] | None = None, streams: str = ""
                 ) -> dict[str, float]:
    """The figures issue 21 asks for, with whatever forge_record this process imports: one
    session in a fresh SQLite file after a checkpoint, and `team` sessions of one harness
    version and project in one fresh Postgres database (every relation, with indexes, TOAST
    and map forks). With `cli`, the same two on real Claude Code sessions
    (bench/cli_session.py): its first in a fresh SQLite file, `cli` of them in Postgres; with
    `recorded`, on that many sessions of each other real CLI (RECORDED). With `streams`
    ("zstd" or "xz"), each figure's references too (references())."""
    import forge_record

    out: dict[str, float] = {"forge_record": str(Path(forge_record.__file__).resolve().parent)}

    def refer(name: str, sessions: list[list[Exchange]]) -> None:
        if streams:
            out.update((f"{name}_{key}", value)
                       for key, value in references(sessions, streams == "xz").items())

    sent = exchanges(calls, 0)[0]
    out.update(_sqlite_one("sqlite_one_session", sent, tmp / "one.db"))
    refer("sqlite_one_session", [sent])
    if team:
        members = [exchanges(calls, seed, TEAM_HARNESS)[0] for seed in range(team)]
        out.update(_team(calls, members))
        refer("postgres_team", members)
    if cli:
        import cli_session

        made = [captured(made, seed) for seed, made in
                enumerate(cli_session.sessions(cli, calls))]
        out.update(_sqlite_one("cli_sqlite_one_session", made[0], tmp / "cli.db"))
        out.update(_postgres("cli_postgres", made))
        refer("cli_sqlite_one_session", made[:1])
        refer("cli_postgres", made)
    for name, count in (recorded or {}).items():
        if count:
            # recorded as records (bench/recorded.py), which record() finalizes as they are
            module, keywords = RECORDED[name]
            made = importlib.import_module(module).sessions(count, calls, **keywords)
            out.update(_sqlite_one(f"{name}_sqlite_one_session", made[0], tmp / f"{name}.db"))
            out.update(_postgres(f"{name}_postgres", made))
            refer(f"{name}_sqlite_one_session", made[:1])
            refer(f"{name}_postgres", made)
    return out


def references(sessions: list[list[Exchange]], xz: bool = False) -> dict[str, float]:
    """Raw vs the sessions' raw bodies, one after another, as one stream with a window over all
    of them: zstd at level 22 with long-distance matching, and with `xz` also xz -9e (LZMA2,
    1.5 GB dictionary; minutes for 20 real sessions). No random access, and no records,
    headers, rows or indexes, which a store keeps as well: what the content allows, not what
    a layout can reach."""
    bodies = b"".join(e.raw_request + e.raw_response for sent in sessions for e in sent)
    params = zstandard.ZstdCompressionParameters.from_level(
        22, window_log=30, enable_ldm=True, threads=2)
    out = {"zstd22_stream_ratio": len(bodies) / len(
        zstandard.ZstdCompressor(compression_params=params).compress(bodies))}
    if xz:
        import lzma

        filters = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME,
                    "dict_size": 1536 << 20}]
        out["xz_stream_ratio"] = len(bodies) / len(lzma.compress(bodies, filters=filters))
    return out


def run_id(name: str) -> str:
    """A session id shaped as `forge-record run` makes them (16 hex digits): every exchange
    row and its index entry hold it, so a short name would flatter the figures."""
    return hashlib.sha256(name.encode()).hexdigest()[:16]


def _raw(sent: list[Exchange]) -> int:
    return sum(len(e.raw_request) + len(e.raw_response) for e in sent)


def _sqlite_one(name: str, sent: list[Exchange], path: Path) -> dict[str, float]:
    with open_store(f"sqlite:///{path}") as store:
        record(store, run_id("one"), sent)
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = os.path.getsize(path)
    return {f"{name}_bytes": size, f"{name}_ratio": _raw(sent) / size}


def vacuum(store) -> None:
    """What autovacuum does between the sessions of a Postgres store in use (it looks every
    minute): the row versions a session left dead (the pieces of the pack groups it sealed,
    their blob rows' old versions, its session row's updates) become space that the next
    sessions' rows take. Without it, a store written in one go, as here, keeps them all."""
    import sqlalchemy as sa

    with store._engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(sa.text("VACUUM"))


def _postgres(name: str, sessions: list[list[Exchange]]) -> dict[str, float]:
    """The sessions in one fresh Postgres database, vacuumed after each: what it holds a
    session."""
    with postgres_database(f"bench_storage_{os.getpid()}") as (url, _), \
            open_store(url) as store:
        for n, sent in enumerate(sessions):
            record(store, run_id(f"s{n}"), sent)
            vacuum(store)
        size = postgres_size(store, every=True)
    return {f"{name}_sessions": len(sessions), f"{name}_bytes_per_session": size / len(sessions),
            f"{name}_ratio": sum(map(_raw, sessions)) / size}


def _team(calls: int, members: list[list[Exchange]]) -> dict[str, float]:
    team, raw = len(members), sum(map(_raw, members))
    with postgres_database(f"bench_storage_{os.getpid()}") as (url, _), \
            open_store(url) as store:
        for seed, sent in enumerate(members):
            record(store, run_id(f"team-{seed}"), sent)
            vacuum(store)
        size = postgres_size(store, every=True)
    sent, serve = _serve(calls, members)
    return {"postgres_team_sessions": team, "postgres_team_bytes": size,
            "postgres_team_ratio": raw / size, "postgres_team_bytes_per_session": size / team,
            "postgres_segment_a_call_bytes": serve,
            "postgres_segment_a_call_ratio": _raw(sent) / serve}


def _serve(calls: int, members: list[list[Exchange]]) -> tuple[list[Exchange], int]:
    """One more session of the team's harness version, written as `serve` writes a rollout
    past its encoders' budget: its encoder let go after every call (a segment a call). It is
    what the tables grow by, so nothing may be freed before it that it could take, or left
    dead that it would split index pages around: the team is written into a database of its
    own without sealing its pack groups (the rollout's own stream is its writer's shared one,
    which is never sealed), and with autovacuum off (which made it vary by 8 KB)."""
    import sqlalchemy as sa

    with postgres_database(f"bench_storage_{os.getpid()}") as (url, _), \
            open_store(url) as store:
        with store.transaction("autovacuum off") as conn:
            for (table,) in conn.execute(sa.text(TABLES)).all():
                conn.execute(sa.text(f"ALTER TABLE {table} SET (autovacuum_enabled = off, "
                                     "toast.autovacuum_enabled = off)"))
        writes = store._writes
        if hasattr(writes, "sealable"):
            store._seal = writes.sealable.clear
        for seed, sent in enumerate(members):
            record(store, run_id(f"team-{seed}"), sent)
        before = postgres_size(store, every=True)
        store.__dict__.pop("_seal", None)  # the rollout seals as a writer does
        sent = exchanges(calls, len(members), TEAM_HARNESS)[0]
        let_go = getattr(writes, "_retire", None) or (lambda sid: writes.forget({sid}))
        add = store.add_exchange
        store.add_exchange = lambda sid, ex: (add(sid, ex), let_go(sid))
        record(store, run_id("serve"), sent)
        return sent, postgres_size(store, every=True) - before


def token_session(calls: int, seed: int = 0) -> list[Exchange]:
    """An engine rollout with token ids: each prompt is the previous prompt and output plus
    a new turn; logprobs are float32 values, as vLLM sends them."""
    import struct

    from forge_record.records import Message, Request, Response, Text, Tokens

    rng = random.Random(seed)
    f32 = [struct.unpack("<f", struct.pack("<f", -rng.expovariate(0.5)))[0] for _ in range(999)]
    prompt, messages, out = [rng.randrange(150_000) for _ in range(2000)], [], []
    for seq in range(1, calls + 1):
        messages = [*messages, Message(role="user", content=[Text(text=f"result {seq}")])]
        ids = [rng.randrange(150_000) for _ in range(rng.randint(20, 400))]
        tokens = Tokens(prompt_ids=list(prompt), ids=ids, logprobs=[rng.choice(f32) for _ in ids],
                        top_logprobs=None)
        out.append(Exchange(seq=seq, dialect="openai-chat", url="http://engine/v1/chat/completions",
                            request=Request(model="policy", messages=list(messages)),
                            response=Response(model="policy", content=[Text(text="ok")],
                                              tokens=tokens)))
        messages = [*messages, Message(role="assistant", content=[Text(text="ok")])]
        prompt = prompt + ids + [rng.randrange(150_000) for _ in range(rng.randint(50, 600))]
    return out


def token_bytes(calls: int, tmp: Path) -> None:
    """Bytes per token: the same rollout stored with and without its tokens."""
    import sqlalchemy as sa

    sent = token_session(calls)
    held = sum(len(e.response.tokens.prompt_ids) + len(e.response.tokens.ids) for e in sent)
    new = len(sent[-1].response.tokens.prompt_ids) + len(sent[-1].response.tokens.ids)
    sizes = {}
    for way in ("blobs", "none", "lists"):
        with open_store(f"sqlite:///{tmp / f'tokens-{way}.db'}") as store:
            store.add_session(Session(id="t"))
            encode = segments.SessionEncoder._tokens
            if way == "lists":  # as revision 0004 kept them: JSON lists in the manifest
                segments.SessionEncoder._tokens = lambda *a: (None, 0)
            try:
                for ex in sent:
                    if way == "none":
                        ex = dataclasses.replace(ex, response=dataclasses.replace(
                            ex.response, tokens=None))
                    store.add_exchange("t", ex)
            finally:
                segments.SessionEncoder._tokens = encode
            with store.reading("measure") as conn:
                sizes[way] = conn.scalar(sa.text(
                    "SELECT (SELECT coalesce(sum(length(data)), 0) FROM packs) + "
                    "(SELECT sum(length(record)) FROM exchanges)"))
    print(f"5. token ids ({calls} engine calls, {held:,} token ids held, {new:,} distinct "
          f"positions, logprobs float32)")
    for way, what in (("blobs", "packed, prompts as what they add"),
                      ("lists", "JSON lists in the manifest (rev. 0004)")):
        cost = sizes[way] - sizes["none"]
        print(f"  {what:<40} {cost / 1e3:8.1f} KB: {cost / held:.3f} bytes per token held, "
              f"{cost / new:.2f} per new token")


def baseline(rev: str, calls: int, team: int, cli: int,
             recorded: dict[str, int]) -> dict[str, float]:
    """disk_figures() run by the forge_record of revision `rev` (a git worktree in /tmp, its
    packages laid out as the installed package maps them), with this bench's session."""
    import json
    import subprocess

    root = Path(__file__).resolve().parent.parent
    tree = Path(tempfile.gettempdir()) / f"forge-record-{rev}"
    if not tree.exists():
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(tree), rev],
                       check=True, capture_output=True)
    pkg = tree.parent / f"forge-record-{rev}-pkg"
    if not pkg.exists():
        (pkg / "forge_record").mkdir(parents=True)
        for entry in (tree / "recorder").iterdir():
            (pkg / "forge_record" / entry.name).symlink_to(entry)
        for sub, folder in (("addons", "addons"), ("harness_shims", "harness_shims"),
                            ("store", "store")):
            (pkg / "forge_record" / sub).symlink_to(tree / folder)
    done = subprocess.run(
        [sys.executable, __file__, "--on-disk-json", "--calls", str(calls), "--team", str(team),
         "--cli", str(cli), *[a for name, n in recorded.items() for a in (_option(name), str(n))]],
        env={**os.environ, "PYTHONPATH": str(pkg)}, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout)


def compare(calls: int, team: int, rev: str | None, cli: int,
            recorded: dict[str, int], streams: str = "zstd") -> None:
    import forge_record

    with tempfile.TemporaryDirectory() as tmp:
        now = disk_figures(calls, team, Path(tmp), cli, recorded, streams)
    print(f"4. on disk ({Path(forge_record.__file__).parent})")
    then = baseline(rev, calls, team, cli, recorded) if rev else {}
    if then:
        print(f"  revision {rev} imported from {then['forge_record']}")
    for key, value in now.items():
        if key.endswith("ratio"):
            before = f"   revision {rev}: {then[key]:6.0f}x" if key in then else ""
            print(f"  {key:<34} {value:6.0f}x{before}")
        elif key.endswith("bytes") or key.endswith("per_session"):
            before = f"   revision {rev}: {then[key] / 1e3:8.1f} KB" if key in then else ""
            print(f"  {key:<34} {value / 1e3:8.1f} KB{before}")


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument("--sessions", type=int, default=3, help="for the file-size figure")
    parser.add_argument("--store", help="an empty store to measure in (default: a temp SQLite)")
    parser.add_argument("--team", type=int, default=20,
                        help="sessions of one harness version in a fresh Postgres (0: none)")
    parser.add_argument("--baseline", metavar="REV", help="also measure on-disk figures at REV")
    parser.add_argument("--on-disk", action="store_true", help="only the on-disk figures")
    parser.add_argument("--cli", type=int, default=0, metavar="N",
                        help="on-disk figures on N recorded Claude Code sessions too "
                             "(bench/cli_session.py)")
    for name, (module, keywords) in RECORDED.items():
        parser.add_argument(_option(name), dest=name, type=int, default=0, metavar="N",
                            help=f"on-disk figures on N recorded sessions of that CLI too "
                                 f"(bench/{module}.py{', ' if keywords else ''}"
                                 f"{', '.join(keywords)})")
    parser.add_argument("--xz", action="store_true",
                        help="with --on-disk: an xz -9e reference too (minutes a figure)")
    parser.add_argument("--on-disk-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    recorded = {name: getattr(args, name) for name in RECORDED}
    if args.on_disk_json:
        import json

        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(disk_figures(args.calls, args.team, Path(tmp), args.cli,
                                          recorded)))
        return
    if args.on_disk:
        compare(args.calls, args.team, args.baseline, args.cli, recorded,
                "xz" if args.xz else "zstd")
        return
    sent, chains = exchanges(args.calls, 0)
    requests = sum(len(e.raw_request) for e in sent)
    responses = sum(len(e.raw_response) for e in sent)
    raw = requests + responses
    print(f"session: {args.calls} calls, raw {raw / MB:.1f} MB ({requests / MB:.1f} MB requests, "
          f"{responses / MB:.2f} MB responses; "
          f"last request {len(sent[-1].raw_request) / 1e3:.0f} KB)")
    options(sent, chains, raw)
    with tempfile.TemporaryDirectory() as tmp:
        url = args.store or f"sqlite:///{Path(tmp) / 'bench.db'}"
        with open_store(url) as store:
            if store.list_sessions(limit=1):
                sys.exit(f"{url} is not empty: the sizes would count its other content")
            took = record(store, "bench", sent)
            parts = payload(store, "bench")
            print(f"2. the store ({store.dialect})")
            for name, size in parts.items():
                print(f"  {name:<26} {size / 1e3:8.1f} KB")
            records = sum(v for k, v in parts.items() if not k.startswith("raw"))
            everything = sum(parts.values())
            print(f"  records alone (no raw bodies)      {records / 1e3:8.1f} KB  "
                  f"{raw / records:6.0f}x vs raw")
            print(f"  with raw bodies reproducible       {everything / 1e3:8.1f} KB  "
                  f"{raw / everything:6.0f}x vs raw")
            if store.dialect == "postgresql":
                on_disk = postgres_size(store)
                print(f"  Postgres tables, indexes and TOAST {on_disk / 1e3:8.1f} KB  "
                      f"{raw / on_disk:6.0f}x vs raw (one session, fixed overhead included)")
            for kind in ("", " cpu"):
                parse, write = took["parse" + kind], took["write" + kind]
                print(times(f"redact + parse (finalize){kind}", parse))
                print(times(f"encode + compress + commit{kind}", write))
                both = [a + b for a, b in zip(parse, write, strict=True)]
                print(times(f"writer thread, all of it{kind}", both))
            submit = submit_cost(url, sent, Path(tmp) / "spool")
            print(f"  event loop (Writer.submit_exchange) mean {statistics.mean(submit):.1f} us, "
                  f"max {max(submit):.1f} us")
            print("3. reading")
            reading(store, "bench", sent)
        disk(args.sessions, args.calls, raw, Path(tmp))
        token_bytes(args.calls, Path(tmp))
    compare(args.calls, args.team, args.baseline, args.cli)


if __name__ == "__main__":
    main()
