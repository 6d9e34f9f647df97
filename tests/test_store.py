"""forge_record.store.Store on SQLite: round trips, compression, lookup, sums, secrets, errors.

The make_* builders and check_* helpers are shared with test_store_postgres.py.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from forge_record.errors import SessionNotFound, StoreError
from forge_record.records import (
    ERROR,
    Exchange,
    Media,
    Message,
    Other,
    Reasoning,
    Request,
    Response,
    Session,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    Usage,
)
from forge_record.store import Store, codec, default_store_url, open_store

API_KEY = "sk-ant-dummy-SECRET123"
BEARER = "Bearer dummy-TOKEN-456"
RAW_REQUEST = b'{"model":"claude-x","messages":[' + b'{"role":"user","content":"hi"},' * 200 + b"]}"
RAW_RESPONSE = b"event: message_start\ndata: {}\n\n" * 100


def make_session(id: str = "0198c0de-aaaa-7000-8000-000000000001", started_at=1_760_000_000.25):
    return Session(
        id=id,
        harness="claude",
        harness_version="2.1.0",
        argv=["claude", "-p", "hi"],
        cwd="/home/u/proj",
        user="u",
        host="box",
        tags={"team": "x", "ünï": "cödé"},
        started_at=started_at,
    )


def make_exchange(seq: int = 0, **overrides) -> Exchange:
    """An exchange that uses every block kind and every optional field."""
    request = Request(
        model="claude-x",
        system=[Text(text="be brief", citations=[{"cited_text": "a"}])],
        tools=[Tool(name="Bash", description="run", parameters={"type": "object"}),
               Tool(name="web_search", kind="web_search_20250305")],
        messages=[
            Message(role="user", content=[
                Text(text="look"),
                Media(type="image", media_type="image/png", sha256="ab" * 32, size=10),
                Media(type="document", media_type="application/pdf", url="https://x/y.pdf"),
            ]),
            Message(role="assistant", content=[
                Reasoning(text="hmm", signature="sig"),
                Reasoning(encrypted="opaque=="),
                ToolCall(id="t1", name="Bash", arguments={"cmd": "ls"},
                         arguments_raw='{"cmd":"ls"}'),
                ToolCall(id="t2", name="Bash", arguments_raw="{bad", parse_error=True),
            ]),
            Message(role="user", content=[
                ToolResult(tool_call_id="t1", content=[Text(text="a.txt")]),
                ToolResult(tool_call_id="t2", is_error=True, name="bash_result", content=[
                    Media(type="image", sha256="cd" * 32)]),
                Other(data={"type": "future_block", "x": [1, 2]}),
            ]),
        ],
        stream=True,
        parameters={"max_tokens": 1024, "temperature": 0.5, "metadata": {"user_id": "u"}},
    )
    response = Response(
        id="msg_1",
        model="claude-x-20250101",
        content=[
            Reasoning(text="plan", signature="s2"),
            Text(text="done"),
            ToolCall(id="t3", name="Bash", arguments={"cmd": "pwd"}, arguments_raw='{"cmd":"pwd"}'),
            ToolCall(id="t4", name="web_search", arguments={"q": "x"}, server=True),
        ],
        stop_reason="tool_use",
        usage=Usage(input_tokens=10, output_tokens=20, cache_read_tokens=300,
                    cache_write_tokens=4, reasoning_tokens=5, raw={"input_tokens": 10}),
        error={"type": "overloaded_error", "message": "later"},
        extras={"stop_sequence": None, "unknown_events": [{"type": "ping"}]},
    )
    fields = dict(
        seq=seq,
        dialect="anthropic.messages",
        url="https://api.anthropic.com/v1/messages?beta=true",
        status=ERROR,
        http_status=200,
        started_at=1_760_000_001.125,
        first_byte_at=1_760_000_001.5,
        ended_at=1_760_000_003.0,
        request=request,
        response=response,
        request_headers={"anthropic-version": "2023-06-01", "content-type": "application/json"},
        response_headers={"request-id": "req_1"},
        flags=["decode_error"],
        raw_request=RAW_REQUEST,
        raw_response=RAW_RESPONSE,
    )
    return Exchange(**(fields | overrides))


def with_secret_headers(ex: Exchange) -> Exchange:
    return dataclasses.replace(
        ex,
        request_headers=ex.request_headers | {"X-Api-Key": API_KEY, "authorization": BEARER,
                                              "Cookie": "c=" + API_KEY},
        response_headers=ex.response_headers | {"Set-Cookie": "s=" + BEARER},
    )


def check_round_trip(store: Store) -> None:
    session, exchange = make_session(), make_exchange()
    store.add_session(session)
    store.add_exchange(session.id, exchange)
    store.end_session(session.id, 1_760_000_100.5, 3)

    assert store.get_session(session.id) == dataclasses.replace(
        session, ended_at=1_760_000_100.5, exit_code=3)
    [with_raw] = store.iter_exchanges(session.id, raw=True)
    assert with_raw == exchange
    [without_raw] = store.iter_exchanges(session.id)
    assert without_raw == dataclasses.replace(exchange, raw_request=b"", raw_response=b"")


def check_secrets_dropped(store: Store) -> None:
    """Write an exchange with secret headers; return nothing, the caller inspects storage."""
    store.add_session(make_session("secrets"))
    sent = with_secret_headers(make_exchange())
    before = dataclasses.replace(sent)
    store.add_exchange("secrets", sent)
    assert sent == before  # the caller's object is not modified
    [stored] = store.iter_exchanges("secrets")
    assert stored.request_headers == make_exchange().request_headers
    assert stored.response_headers == make_exchange().response_headers


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


def check_summaries(store: Store) -> None:
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


SUMMARY_KEYS = ("calls", "side_calls", "tool_calls", "input_tokens", "output_tokens",
                "cache_read_tokens", "cache_write_tokens", "model")


# --- SQLite ----------------------------------------------------------------------------------


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "home" / "traces.db"


@pytest.fixture
def store(db_path: Path):
    with open_store(default_store_url(db_path.parent)) as s:
        yield s


def raw_column(db_path: Path, column: str) -> bytes:
    with sqlite3.connect(db_path) as conn:
        return conn.execute(f"SELECT {column} FROM exchanges").fetchone()[0]


def test_round_trip(store):
    check_round_trip(store)


def test_sqlite_is_in_wal_mode(store, db_path):
    assert db_path.exists()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_raw_bodies_are_compressed_at_rest(store, db_path):
    check_round_trip(store)
    for column, plain in (("raw_request", RAW_REQUEST), ("raw_response", RAW_RESPONSE)):
        stored = raw_column(db_path, column)
        assert len(stored) < len(plain) / 4
        assert plain[:40] not in stored
        assert codec.decompress(stored) == plain
    assert b"be brief" not in raw_column(db_path, "record")  # the record is compressed too


def test_empty_raw_bodies_stay_empty(store, db_path):
    store.add_session(make_session())
    store.add_exchange(make_session().id, make_exchange(raw_request=b"", raw_response=b""))
    assert raw_column(db_path, "raw_request") == b""
    [ex] = store.iter_exchanges(make_session().id, raw=True)
    assert (ex.raw_request, ex.raw_response) == (b"", b"")


def test_codec_round_trips():
    obj = {"a": [1, 2.5, None, "ü"], "b": {"c": True}}
    assert codec.unpack(codec.pack(obj)) == obj
    assert codec.compress(b"") == b"" and codec.decompress(b"") == b""


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
    check_summaries(store)


def test_duplicate_seq_is_a_store_error(store):
    store.add_session(make_session())
    store.add_exchange(make_session().id, make_exchange(0))
    with pytest.raises(StoreError, match="cannot add exchange 0") as info:
        store.add_exchange(make_session().id, make_exchange(0))
    assert "\n" not in str(info.value)


def test_secret_headers_never_reach_the_file(store, db_path):
    check_secrets_dropped(store)
    files = [p for p in db_path.parent.iterdir() if p.name.startswith(db_path.name)]
    assert db_path in files
    store.close()  # checkpoints the WAL into the main file; check both states
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


def test_default_store_url(tmp_path):
    assert default_store_url(tmp_path) == f"sqlite:///{tmp_path}/traces.db"


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
