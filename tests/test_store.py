"""forge_record.store.Store on SQLite and on the real Postgres: round trips (records, and raw
bodies byte for byte, on every exchange of a realistic session), dedup, random access,
lookup, sums, status, secrets and errors.

Every test that takes `store` or `store_url` runs on both backends. The Postgres runs share
one fresh database per test module (forge_record_test_<hex>, dropped afterwards), emptied
before each test; they skip when no Postgres answers, and fail instead under CI=true. Set
FORGE_RECORD_TEST_PG to point at another server's maintenance database.

The fixtures and the make_* / check_* helpers are shared with the other store test modules.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import (
    API_KEY,
    BEARER,
    RAW_REQUEST,
    RAW_RESPONSE,
    bench_module,
    check_round_trip,
    check_secrets_dropped,
    count,
    exchanges_of,
    make_exchange,
    make_session,
    realistic_exchanges,
    without_raw,
)

from forge_record import paths
from forge_record.errors import SessionNotFound, StoreError
from forge_record.records import (
    Message,
    Request,
    Response,
    Text,
    ToolCall,
    Usage,
)
from forge_record.store import Store, content, default_store_url, open_store
from forge_record.store.engine import SQLITE_PAGE_SIZE
from forge_record.store.items import AddExchange, AddSession, EndSession


def add_summary_fixture(store: Store) -> None:
    """Session "old" with 2 model calls and 1 side call; session "new" with none."""
    store.add_session(make_session("old", started_at=100.0))
    store.add_session(make_session("new", started_at=200.0))
    usage = Usage(input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4)
    content = [ToolCall(id="a", name="x"), Text(text="t"), ToolCall(id="b", name="y")]
    first = make_exchange(0, request=Request(model=None),
                          response=Response(model="m-first", usage=usage, content=content))
    second = make_exchange(1, request=Request(model="m-second"),
                           response=Response(usage=usage, content=[ToolCall(id="c", name="x")]))
    side = make_exchange(2, kind="side", request=Request(model="m-side"),
                         response=Response(usage=Usage(input_tokens=999)))
    no_usage = make_exchange(3, response=None)
    for ex in (first, second, side, no_usage):
        store.add_exchange("old", ex)


SUMMARY_KEYS = ("calls", "side_calls", "tool_calls", "input_tokens", "output_tokens",
                "cache_read_tokens", "cache_write_tokens", "model")


# --- round trips -------------------------------------------------------------------------


def test_round_trip(store):
    check_round_trip(store)


def test_every_exchange_of_a_realistic_session_rebuilds_byte_for_byte(store):
    """60 calls of an agent loop (a moving cache_control marker, a sub-agent, title calls,
    files re-read after edits): longer than one raw keyframe chain."""
    sent = realistic_exchanges(60)
    store.add_session(make_session("real"))
    for ex in sent:
        store.add_exchange("real", ex)
    back = list(store.iter_exchanges("real", raw=True))
    assert [e.seq for e in back] == [e.seq for e in sent]
    for a, b in zip(sent, back, strict=True):
        assert b.raw_request == a.raw_request and b.raw_response == a.raw_response, a.seq
        assert b == a, a.seq
    assert list(store.iter_exchanges("real")) == [without_raw(e) for e in sent]
    for ex in reversed(sent):  # random access, coldest cache first
        assert store.get_exchange("real", ex.seq, raw=True) == ex
    assert store.get_exchange("real", 7) == without_raw(sent[6])


@pytest.mark.parametrize("budget", [None, 1])
def test_interleaved_sessions_keep_their_segments_within_the_encoders_budget(
        store, monkeypatch, budget):
    """`serve` writes many rollouts' calls interleaved: each session's encoder is kept (one
    segment each, deriving from its parent) while the encoders' footprints fit the budget;
    past it, the least recently written one starts over, and everything still reads back."""
    from forge_record.store import batch

    if budget is not None:
        monkeypatch.setattr(batch, "ENCODER_BYTES", budget)
    sent = realistic_exchanges(6)
    names = [f"r{n}" for n in range(20)]
    for name in names:
        store.add_session(make_session(name))
    for ex in sent:
        for name in names:
            store.write([AddExchange(name, ex)])
    with store.reading("segments") as conn:
        import sqlalchemy as sa

        segments = conn.scalar(sa.text(
            "SELECT count(*) FROM (SELECT DISTINCT session_id, segment FROM exchanges) s"))
    assert segments == (len(names) if budget is None else len(names) * len(sent))
    for name in names:
        assert list(store.iter_exchanges(name, raw=True)) == sent
    writes = store._writes  # the budget is kept by a running total of footprints
    assert writes._held == sum(e.footprint for e in writes._encoders.values()) > 0
    assert len(writes._encoders) == (len(names) if budget is None else 1)


def stored_bytes(store, session_id: str) -> int:
    """Its manifests and raw frames (packs are the blobs', whichever session named them)."""
    import sqlalchemy as sa

    with store.reading("bytes") as conn:
        return conn.scalar(sa.text(
            "SELECT sum(length(record) + length(raw_request) + length(raw_response)) "
            "FROM exchanges WHERE session_id = :s"), {"s": session_id})


def test_a_session_whose_encoder_was_let_go_resumes_from_its_tail(store, monkeypatch):
    """Past the encoders' budget a session's next call starts a segment, which derives from
    the session's tail (the last exchanges of its chains) in the segment before: manifests
    and raw bodies stay small, and reading one exchange decodes at most REACH segments. "a" then
    goes on alone in its last segment past a raw keyframe, which names messages its
    encoder never held (they came from the tail)."""
    import orjson
    import sqlalchemy as sa

    from forge_record.store import batch, delta, reader, segments

    monkeypatch.setattr(batch, "ENCODER_BYTES", 1)  # only the newest encoder is kept
    interleaved = segments.REACH + segments.REACH // 2  # "a" resumes its last segment
    sent = realistic_exchanges(interleaved + delta.RAW_KEYFRAME_EVERY + 16)
    for name in ("a", "b", "c", "d"):
        store.add_session(make_session(name))
    for ex in sent[:interleaved]:
        store.write([AddExchange("a", ex)])
        store.write([AddExchange("b", ex)])
    for ex in sent[interleaved:]:
        store.write([AddExchange("a", ex)])
    monkeypatch.setattr(batch, "TAIL_BYTES", 0)  # "c" and "d" as "a" and "b", no tail kept
    for ex in sent[:interleaved]:
        store.write([AddExchange("c", ex)])
        store.write([AddExchange("d", ex)])
    assert stored_bytes(store, "b") < 0.7 * stored_bytes(store, "d")
    # Their resumed segments pack into the writer's shared stream: no pack group a call.
    with store.reading("groups") as conn:
        figures = dict(conn.execute(sa.text("SELECT id, pack_groups FROM sessions")).all())
    for name in "abcd":
        figure = figures[name]  # JSON in Postgres, text in SQLite
        figure = orjson.loads(figure) if isinstance(figure, str | bytes) else figure
        assert len(figure["groups"]) <= 3, name

    decoded = []
    real = reader.segment_pieces
    monkeypatch.setattr(reader, "segment_pieces",
                        lambda *a, **k: decoded.append(a) or real(*a, **k))
    for name, calls in (("a", sent), ("b", sent[:interleaved])):
        assert list(store.iter_exchanges(name, raw=True)) == calls
        for ex in calls:
            decoded.clear()
            assert store.get_exchange(name, ex.seq, raw=True) == ex, (name, ex.seq)
            assert len(decoded) <= segments.REACH
    assert list(store.iter_exchanges("d", raw=True)) == sent[:interleaved]


@pytest.mark.parametrize("prefix", [b"", b"".join(
    b'{"line": %d, "text": "a file the harness reads again"}\n' % i for i in range(5000))])
def test_a_stream_that_ended_lends_its_compressor_to_the_next_one_which_writes_the_same_bytes(
        prefix):
    """Past the encoders' budget `serve` ends and starts streams on every call; a new
    compressor cost 0.5 ms of page faults there. The next stream reuses one, and what it
    writes does not depend on what the compressor wrote before."""
    from forge_record.store import compression

    zstd = compression.zstandard
    before = [b'{"line": %d, "text": "a file the harness reads again"}\n' % i * 40
              for i in range(0, 4000, 7)]
    pieces = [b'{"line": %d, "text": "a file the harness reads again"}\n' % i * 3
              for i in (11, 700, 3999)]
    first = compression.Stream(prefix=prefix)
    for data in before:  # its match tables full of entries the next frame must not use
        first.piece(data)
    used = first._compressor
    del first
    second = compression.Stream(prefix=prefix)
    assert second._compressor is used
    written = [second.piece(data) for data in pieces]
    params = compression._stream_params(compression.STREAM_LEVEL, compression.STREAM_TABLE_LOG)
    new = zstd.ZstdCompressor(compression_params=params, **(
        {"dict_data": compression._prefix_dict(prefix)} if prefix else {})).compressobj()
    assert written == [new.compress(p) + new.flush(zstd.COMPRESSOBJ_FLUSH_BLOCK)
                       for p in pieces]
    assert compression.decode_pieces(written, prefix) == pieces


def test_a_conversation_goes_on_from_its_last_call_after_many_calls_of_another(store):
    """A sub-agent's calls in between, more than the writer's window of recent exchanges,
    do not cut the main loop's chain: its next call still derives from its last one (its raw
    request a delta, not a keyframe), and everything reads back."""
    from forge_record.store import segments

    gen_session = bench_module("gen_session")
    main = [c for c in gen_session.calls(12, seed=0) if c.chain == "main"][:4]
    agent = [c for c in gen_session.calls(30, seed=7) if c.chain == "main"][:segments.RECENT + 4]
    sent = exchanges_of(main[:3] + agent + main[3:])
    store.add_session(make_session("s"))
    for ex in sent:
        store.add_exchange("s", ex)
    with store.reading("frames") as conn:
        import sqlalchemy as sa

        frame = conn.scalar(sa.text("SELECT raw_request FROM exchanges WHERE seq = :seq"),
                            {"seq": len(sent)})
    assert frame.lstrip(b"W")[:1] == b"D"
    assert list(store.iter_exchanges("s", raw=True)) == sent


def test_compaction_and_forks_rebuild_exactly(store):
    """History that is not append-only: a compaction replaces old turns with a summary, a
    retry forks from an earlier point, and the system prompt changes midway."""
    def ask(seq, messages, system="sys"):
        body = f'{{"n":{seq},"cache_control":"{seq}"}}'.encode() + b"x" * 300
        return make_exchange(seq, request=Request(model="m", system=[Text(text=system)],
                                                  messages=messages), raw_request=body)

    u = [Message(role="user", content=[Text(text=f"turn {i} " * 50)]) for i in range(6)]
    summary = Message(role="user", content=[Text(text="summary of turns 0-3")])
    sent = [ask(1, u[:1]), ask(2, u[:3]), ask(3, u[:5]), ask(4, [summary, u[4]]),
            ask(5, [summary, u[4], u[5]], system="new sys"), ask(6, u[:2]), ask(7, [])]
    store.add_session(make_session("s"))
    for ex in sent:
        store.add_exchange("s", ex)
    assert list(store.iter_exchanges("s", raw=True)) == sent
    for ex in sent:
        assert store.get_exchange("s", ex.seq, raw=True) == ex


def test_request_and_response_may_be_missing_or_undecodable(store):
    sent = [make_exchange(1, request=None, flags=["request_decode_error"]),
            make_exchange(2, response=None, raw_response=b""),
            make_exchange(3, request=None, response=None, raw_request=b"", raw_response=b"")]
    store.add_session(make_session("s"))
    for ex in sent:
        store.add_exchange("s", ex)
    assert list(store.iter_exchanges("s", raw=True)) == sent


def test_blobs_are_stored_once_per_store(store, store_url):
    """Two sessions with the same system prompt and tools share those blobs; a session's
    requests share their message prefix."""
    one = realistic_exchanges(12)
    store.add_session(make_session("a"))
    for ex in one:
        store.add_exchange("a", ex)
    blobs_after_one = count(store_url, "blobs")
    store.add_session(make_session("b"))
    for ex in one:
        store.add_exchange("b", ex)
    assert count(store_url, "blobs") == blobs_after_one
    assert list(store.iter_exchanges("b", raw=True)) == one


def test_storage_is_a_small_fraction_of_the_raw_bytes(store, store_url):
    sent = realistic_exchanges(60)
    store.add_session(make_session("s"))
    for ex in sent:
        store.add_exchange("s", ex)
    raw = sum(len(e.raw_request) + len(e.raw_response) for e in sent)
    with store.reading("measure") as conn:
        import sqlalchemy as sa

        stored = sum(conn.scalar(sa.text(q)) for q in (
            "SELECT sum(length(record) + length(raw_request) + length(raw_response)) "
            "FROM exchanges", "SELECT sum(length(data)) FROM packs",
            "SELECT sum(length(hash)) FROM blobs"))
    assert raw / stored > 50  # the bench measures ~150x on 150 calls; this is 60


def test_a_session_read_shares_what_its_requests_repeat(store):
    """Reading a session decodes each message once and shares it between the requests that
    repeat it (what keeps reading linear); every exchange still has its own containers, so
    replacing a list or a parameter of one exchange changes no other."""
    sent = realistic_exchanges(12)
    store.add_session(make_session("s"))
    for ex in sent:
        store.add_exchange("s", ex)
    back = list(store.iter_exchanges("s"))
    requests = [ex.request for ex in back]
    objects_per_blob: dict[bytes, set[int]] = {}
    for m in (m for r in requests for m in r.messages):
        objects_per_blob.setdefault(content.message_blob(m), set()).add(id(m))
    assert sum(len(r.messages) for r in requests) > 2 * len(objects_per_blob)
    assert all(len(ids) == 1 for ids in objects_per_blob.values())
    for part in ("messages", "system", "tools", "parameters"):
        assert len({id(getattr(r, part)) for r in requests}) == len(requests), part
    contents = {id(m.content) for r in requests for m in r.messages}
    assert not contents & {id(ex.response.content) for ex in back}
    assert back == [without_raw(e) for e in sent]


def test_a_failed_write_does_not_corrupt_what_follows(store):
    """A write that fails after its exchange was encoded (a duplicate seq) must not leave the
    session's streams expecting a piece that was never committed."""
    sent = realistic_exchanges(8)
    store.add_session(make_session("s"))
    for ex in sent[:4]:
        store.add_exchange("s", ex)
    with pytest.raises(StoreError, match="cannot add exchange 4"):
        store.add_exchange("s", sent[3])
    for ex in sent[4:]:
        store.add_exchange("s", ex)
    assert list(store.iter_exchanges("s", raw=True)) == sent


def test_manifest_streams_start_from_the_shipped_dictionary(store, monkeypatch):
    """A stream's first manifest has nothing earlier in its stream to refer to; `serve`
    starts one for every rollout. From the dictionary it takes under half the bytes, and
    reads back the same."""
    import sqlalchemy as sa

    from forge_record.store import compression

    shipped, sent = compression.MANIFESTS, realistic_exchanges(3)
    for name in ("with", "without"):
        if name == "without":
            monkeypatch.setattr(compression, "MANIFESTS", None)
        store.add_session(make_session(name))
        store.add_exchange(name, sent[0])
    with store.reading("first pieces") as conn:
        first = dict(conn.execute(sa.text("SELECT session_id, record FROM exchanges")).all())
    assert compression.trained_id(first["with"]) == shipped
    assert compression.trained_id(first["without"]) == 0
    assert len(first["with"]) < 0.5 * len(first["without"])
    for name in ("with", "without"):
        assert store.get_exchange(name, 1, raw=True) == sent[0]


def test_a_stream_naming_a_dictionary_this_version_lacks_is_a_clear_error():
    from forge_record.store import compression

    samples = [b'{"seq": %d, "dialect": "x"}' % i for i in range(500)]
    other = compression.zstandard.train_dictionary(1024, samples, dict_id=0x46529999)
    frame = compression.zstandard.ZstdCompressor(dict_data=other).compress(samples[7])
    with pytest.raises(StoreError, match="names zstd dictionary 1179818393, which this"):
        compression.decode_pieces([frame])


def test_a_failed_write_forgets_the_tails_of_its_sessions(store, monkeypatch):
    """A session whose encoder was let go within a batch keeps a tail from that batch; if
    the batch fails, a later segment must not resume from an exchange never committed."""
    from forge_record.store import batch

    monkeypatch.setattr(batch, "ENCODER_BYTES", 1)
    sent = realistic_exchanges(6)
    for name in ("a", "b"):
        store.add_session(make_session(name))
    store.write([AddExchange("a", ex) for ex in sent[:3]])
    # "b"'s encoder lets "a"'s go, with exchange 4 as its tail; then a duplicate fails all.
    with pytest.raises(StoreError, match="UNIQUE|unique|duplicate"):
        store.write([AddExchange("a", sent[3]), AddExchange("b", sent[0]),
                     AddExchange("b", sent[0])])
    assert not store._writes._tails and not store._writes._shared
    store.write([AddExchange("a", sent[3]), AddExchange("b", sent[0])])
    assert list(store._writes._tails) == ["a"]
    for ex in sent[4:]:
        store.write([AddExchange("a", ex)])
    assert list(store.iter_exchanges("a", raw=True)) == sent
    assert store.get_exchange("a", 6, raw=True) == sent[5]


def test_write_if_absent_skips_what_is_stored(store):
    session = make_session("s")
    items = [AddSession(session), AddExchange("s", make_exchange(1)),
             AddExchange("s", make_exchange(2)), EndSession("s", 5.0, 0)]
    store.write(items[:2])
    store.write(items, if_absent=True)
    store.write(items, if_absent=True)
    assert [e.seq for e in store.iter_exchanges("s")] == [1, 2]
    assert store.get_session("s").exit_code == 0
    with pytest.raises(StoreError, match="cannot add session s"):
        store.write(items[:1])


def test_missing_exchange_is_an_error(store):
    store.add_session(make_session("s"))
    with pytest.raises(StoreError, match="session s has no exchange 9"):
        store.get_exchange("s", 9)


# --- sessions ----------------------------------------------------------------------------


def test_resolve_session(store):
    for sid, t in (("aaaa1111", 1.0), ("aaaa2222", 3.0), ("bbbb3333", 2.0), ("x_y", 0.5)):
        store.add_session(make_session(sid, started_at=t))
    assert store.resolve_session("bbbb3333") == "bbbb3333"
    assert store.resolve_session("aaaa1") == "aaaa1111"
    assert store.resolve_session("b") == "bbbb3333"
    assert store.resolve_session("last") == "aaaa2222"
    assert store.resolve_session("x_") == "x_y"
    for ref in ("zzz", "", "AAAA1", "a%1", "x%"):
        with pytest.raises(SessionNotFound, match=f"no session matches {ref!r}"):
            store.resolve_session(ref)
    with pytest.raises(SessionNotFound, match="2 sessions match 'aaaa'"):
        store.resolve_session("aaaa")


def test_last_with_no_sessions(store):
    with pytest.raises(SessionNotFound, match="no session matches 'last'"):
        store.resolve_session("last")


def test_unknown_session_reads_and_end(store):
    for call in (lambda: store.get_session("nope"), lambda: store.iter_exchanges("nope"),
                 lambda: store.session_summary("nope"), lambda: store.end_session("nope", 1.0, 0)):
        with pytest.raises(SessionNotFound, match="no session matches 'nope'"):
            call()


def test_list_sessions_aggregates(store):
    add_summary_fixture(store)
    newest, oldest = store.list_sessions()
    assert (newest["id"], oldest["id"]) == ("new", "old")
    assert oldest == store.session_summary("old")
    assert {k: oldest[k] for k in SUMMARY_KEYS} == {
        "calls": 3, "side_calls": 1, "tool_calls": 3, "input_tokens": 2, "output_tokens": 4,
        "cache_read_tokens": 6, "cache_write_tokens": 8, "model": "m-first"}
    assert {k: newest[k] for k in SUMMARY_KEYS} == dict.fromkeys(SUMMARY_KEYS, 0) | {"model": None}
    assert oldest["harness"] == "claude" and oldest["tags"] == make_session().tags
    assert [s["id"] for s in store.list_sessions(limit=1)] == ["new"]


def test_status_tells_interrupted_sessions_apart(store):
    """ended: the end was written; recording: no end, recorder alive; interrupted: no end
    and its process is gone (this host) or silent for too long (any host)."""
    # A pid no process can have (a reaped child's pid could be reused on a busy machine).
    dead = Path("/proc/sys/kernel/pid_max").read_text().strip()
    import socket

    here = socket.gethostname()
    store.add_session(make_session("ended"))
    store.end_session("ended", 9.0, 0)
    store.add_session(dataclasses.replace(make_session("alive"), host=here))
    store.add_session(dataclasses.replace(make_session("killed"), host=here),
                      recorder_pid=int(dead) + 1)
    store.write([AddSession(make_session("silent"), recorder_pid=1,
                            heartbeat_at=time.time() - 3600)])
    store.write([AddSession(make_session("no-heartbeat"))])  # as rows from revision 0001
    status = {s["id"]: s["status"] for s in store.list_sessions(limit=None)}
    assert status == {"ended": "ended", "alive": "recording", "killed": "interrupted",
                      "silent": "interrupted", "no-heartbeat": "interrupted"}
    store.heartbeat(["silent"])
    assert store.session_summary("silent")["status"] == "recording"


def test_duplicate_seq_is_a_store_error(store):
    store.add_session(make_session())
    store.add_exchange(make_session().id, make_exchange(0))
    with pytest.raises(StoreError, match="cannot add exchange 0") as info:
        store.add_exchange(make_session().id, make_exchange(0))
    assert "\n" not in str(info.value)


def test_secret_headers_are_dropped(store):
    check_secrets_dropped(store)


# --- SQLite only -------------------------------------------------------------------------


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "home" / "traces.db"


@pytest.fixture
def sqlite_store(db_path: Path):
    with open_store(default_store_url(db_path.parent)) as s:
        yield s


def test_sqlite_is_in_wal_mode(sqlite_store, db_path):
    assert db_path.exists()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_new_sqlite_store_has_small_pages_and_an_old_one_keeps_its_own(tmp_path):
    """A new file takes SQLITE_PAGE_SIZE (issue 21 item 1: rows of a few hundred bytes to a
    kilobyte); a store made with 4 KB pages keeps them, as SQLite cannot change a WAL file's
    page size."""
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    with sqlite3.connect(old) as conn:
        conn.execute("PRAGMA page_size = 4096")
        conn.execute("PRAGMA journal_mode = WAL")
    for path in (new, old):
        with open_store(f"sqlite:///{path}") as store:
            check_round_trip(store)
    sizes = []
    for path in (new, old):
        with sqlite3.connect(path) as conn:
            sizes.append(conn.execute("PRAGMA page_size").fetchone()[0])
    assert sizes == [SQLITE_PAGE_SIZE, 4096] and SQLITE_PAGE_SIZE < 4096


def test_sqlite_puts_a_sessions_small_pieces_into_few_pack_rows(sqlite_store, db_path,
                                                                  monkeypatch):
    """Written an exchange a transaction, a piece goes into the pack row its stream wrote
    last while that holds less than GROW_UNDER bytes; the row's created_at moves with it
    (gc spares young groups); a row that is gone is not grown, a new one is written."""
    from forge_record.store import batch

    clock = iter(range(1000, 10**6, 10))
    monkeypatch.setattr(batch.time, "time", lambda: float(next(clock)))
    sent = realistic_exchanges(60)
    sqlite_store.add_session(make_session("s"))
    with sqlite3.connect(db_path) as conn:
        for ex in sent:
            sqlite_store.add_exchange("s", ex)
            newest, made = conn.execute("SELECT max(id), max(created_at) FROM packs").fetchone()
            mine = conn.execute("SELECT max(touched_at) FROM blobs WHERE pack_id = ?",
                                (newest,)).fetchone()[0]
            assert made == mine  # the row grown or made by this write
        rows = conn.execute("SELECT length(data) FROM packs").fetchall()
    assert len(rows) < len(sent) / 2
    assert sum(n > batch.GROW_UNDER for (n,) in rows) <= 2  # a first piece alone may be
    sqlite_store._writes._encoders["s"].packs.last.id = 10**9  # as if gc had taken it
    more = realistic_exchanges(62)[60:]
    for ex in more:
        sqlite_store.add_exchange("s", ex)
    assert list(sqlite_store.iter_exchanges("s", raw=True)) == sent + more


def test_blob_rows_are_touched_in_whole_seconds_rounded_up(sqlite_store, db_path, monkeypatch):
    """SQLite keeps an integral REAL in 4 bytes instead of 8, on every blob row; rounded up,
    a blob never looks older to gc than it is."""
    from forge_record.store import batch

    monkeypatch.setattr(batch.time, "time", lambda: 1_760_000_000.25)
    check_round_trip(sqlite_store)
    with sqlite3.connect(db_path) as conn:
        stamps = set(conn.execute("SELECT touched_at FROM blobs"))
    assert stamps == {(1_760_000_001,)}  # (typeof() says real either way)


def test_bodies_and_records_are_compressed_at_rest(sqlite_store, db_path):
    check_round_trip(sqlite_store)
    with sqlite3.connect(db_path) as conn:
        raw_request, raw_response, record = conn.execute(
            "SELECT raw_request, raw_response, record FROM exchanges").fetchone()
        packed = b"".join(d for (d,) in conn.execute("SELECT data FROM packs"))
    for stored, plain in ((raw_request, RAW_REQUEST), (raw_response, RAW_RESPONSE)):
        assert len(stored) < len(plain) / 4
        assert plain[:40] not in stored
    for text in (b"be brief", b"a.txt", b"anthropic-version"):
        assert text not in record + packed


def test_a_damaged_blob_is_an_error_not_a_wrong_record(sqlite_store, db_path):
    check_round_trip(sqlite_store)
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE blobs SET start = start + 1")
    with pytest.raises(StoreError, match="does not match its bytes"):
        list(sqlite_store.iter_exchanges(make_session().id))


def test_secret_headers_never_reach_the_file(sqlite_store, db_path):
    check_secrets_dropped(sqlite_store)
    files = [p for p in db_path.parent.iterdir() if p.name.startswith(db_path.name)]
    assert db_path in files
    sqlite_store.close()  # checkpoints the WAL into the main file; check both states
    files += [db_path]
    for path in files:
        if path.exists():
            data = path.read_bytes()
            for secret in (b"SECRET123", b"TOKEN-456", API_KEY.encode(), BEARER.encode()):
                assert secret not in data, f"{secret!r} found in {path.name}"


def test_write_is_durable_when_the_process_dies(db_path):
    """add_exchange returns only after commit: a process killed right after keeps the row."""
    script = f"""
import os
from forge_record.store import open_store
from forge_record.records import Exchange, Session
store = open_store({default_store_url(db_path.parent)!r})
store.add_session(Session(id="s"))
store.add_exchange("s", Exchange(dialect="d", seq=7))
os._exit(0)  # no close, no atexit, no checkpoint
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    with open_store(default_store_url(db_path.parent)) as store:
        assert [ex.seq for ex in store.iter_exchanges("s")] == [7]


def test_default_store_url(tmp_path, monkeypatch):
    assert default_store_url(tmp_path) == f"sqlite:///{tmp_path}/traces.db"
    monkeypatch.setenv("FORGE_RECORD_HOME", str(tmp_path / "home"))
    assert default_store_url() == f"sqlite:///{tmp_path}/home/traces.db"  # the CLI's default
    assert default_store_url is paths.default_store_url  # one definition


def test_in_memory_store():
    with open_store("sqlite://") as store:
        check_round_trip(store)


def _text_file(tmp_path: Path) -> str:
    path = tmp_path / "notes.txt"
    path.write_text("these are not the bytes of an SQLite database\n" * 100)
    return f"sqlite:///{path}"


@pytest.mark.parametrize(
    "url, says",
    [
        ("nosuch://x", "unsupported store URL"),
        ("mysql://u:pw-SECRET@h/db", "unsupported store URL"),
        ("not a url at all", "malformed store URL"),
        ("sqlite:////proc/forbidden/x.db", "cannot open store"),
        (_text_file, "file is not a database"),
        ("postgresql://u:pw-SECRET@127.0.0.1:1/db", "cannot open store"),
    ],
)
def test_bad_urls_are_one_line_store_errors(tmp_path, url, says):
    url = url(tmp_path) if callable(url) else url
    with pytest.raises(StoreError, match=says) as info:
        open_store(url)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    assert "pw-SECRET" not in message
