"""The alembic tree: one head, the exact schema it builds, how stores get migrated, and what
happens to data across revisions (0001 rows survive 0002; downgrading 0002 keeps every
exchange). Each test runs on SQLite and on a fresh Postgres database.
"""


from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import sqlite3
import subprocess
import sys

import pytest
import sqlalchemy as sa
from support import (
    BACKENDS,
    billed,
    chat_exchanges,
    gemini_exchanges,
    make_exchange,
    make_session,
    realistic_exchanges,
    responses_exchanges,
    stamped,
)

from forge_record.errors import StoreError
from forge_record.records import exchange_to_dict, session_to_dict
from forge_record.store import (
    compression,
    default_store_url,
    migrate,
    open_store,
    schema,
    upgrade_store,
)
from forge_record.store import store as store_module
from forge_record.store.engine import make_engine

EXPECTED_COLUMNS = {
    "sessions": [
        "id", "harness", "harness_version", "argv", "cwd", "user_name", "host", "tags",
        "started_at", "ended_at", "exit_code", "record_version", "recorder_pid", "heartbeat_at",
        "lineage", "pack_groups",
    ],
    "exchanges": [
        "id", "session_id", "seq", "dialect", "kind", "model", "started_at", "input_tokens",
        "output_tokens", "cache_read_tokens", "cache_write_tokens", "tool_calls",
        "record", "raw_request", "raw_response", "layout", "segment", "piece",
        "raw_request_size", "raw_response_size",
    ],
    "packs": ["id", "group_id", "size", "data", "created_at", "dictionary_id"],
    "dictionaries": ["id", "harness", "group_id", "size", "created_at"],
    "blobs": ["hash", "pack_id", "start", "length", "touched_at"],
    "labels": ["session_id", "reward", "note", "tags", "created_at", "updated_at"],
    "gateway_sessions": [
        "session_id", "token_hash", "meta", "group_id", "keyed_by", "calls", "status",
        "exit_code", "finished_at", "finish_seq", "created_at",
    ],
    migrate.VERSION_TABLE: ["version_num"],
}
COLUMNS_0001 = {
    "sessions": EXPECTED_COLUMNS["sessions"][:-4],
    "exchanges": ["id", "session_id", "seq", "dialect", "kind", "model", "method", "url",
                  "status", "http_status", "started_at", "first_byte_at", "ended_at",
                  "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                  "tool_calls", "flags", "record", "raw_request", "raw_response"],
    migrate.VERSION_TABLE: ["version_num"],
}
EXPECTED_INDEXES = {"ix_sessions__started_at", "ix_packs__group_id",
                    "ix_gateway_sessions__group_id"}


@pytest.fixture(autouse=True)
def writers_go_on(monkeypatch):
    """Sessions these tests write and do not end stay as a recorder still going leaves them,
    unsealed: Store.close would seal their segments, which only revision 0014 on reads."""
    monkeypatch.setattr(store_module, "SEAL_AT_CLOSE", 0.0)


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    if request.param == "sqlite":
        return default_store_url(tmp_path)
    return request.getfixturevalue("new_database")()


@pytest.fixture
def engine(url):
    engine = make_engine(url)
    yield engine
    engine.dispose()


def columns(engine) -> dict[str, list[str]]:
    inspector = sa.inspect(engine)
    return {t: [c["name"] for c in inspector.get_columns(t)] for t in inspector.get_table_names()}


def indexes(engine) -> set[str]:
    inspector = sa.inspect(engine)
    return {i["name"] for t in inspector.get_table_names() for i in inspector.get_indexes(t)}


def test_single_head():
    """One head, and migrate.HEAD names it (a new revision must move it)."""
    assert migrate.heads() == [migrate.head()] == [migrate.HEAD]


def test_the_revision_is_read_as_alembic_reads_it(engine):
    from alembic.runtime.migration import MigrationContext

    def alembics() -> str | None:
        with engine.connect() as conn:
            return MigrationContext.configure(
                conn, opts=migrate.VERSION_OPTIONS).get_current_revision()

    for revision in (None, "0001", migrate.HEAD):
        if revision is not None:
            migrate.upgrade(engine, revision)
        assert migrate.current(engine) == alembics() == revision


def test_opening_a_store_at_head_does_not_import_alembic(url):
    """A command's start-up: alembic is needed only to migrate, and a SQLite store needs
    none of Postgres' dialect."""
    open_store(url).close()  # made and migrated here
    code = ("import sys; import forge_record.cli; from forge_record.store import open_store; "
            f"open_store({url!r}).close(); "
            "print('alembic' in sys.modules, 'sqlalchemy.dialects.postgresql' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["False", str(url.startswith("postgresql"))]


def test_upgrade_of_a_blank_store_builds_exactly_the_schema(engine, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no alembic.ini here: programmatic use must not need one
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    assert migrate.current(engine) is None

    migrate.upgrade(engine)

    assert migrate.current(engine) == migrate.head()
    assert set(columns(engine)) == {*schema.metadata.tables, migrate.VERSION_TABLE}
    assert {t: columns(engine)[t] for t in EXPECTED_COLUMNS} == EXPECTED_COLUMNS
    assert EXPECTED_INDEXES <= indexes(engine)
    assert migrate.drift(engine) == []  # the migrations and schema.py agree
    assert (root.handlers, root.level) == (handlers, level)  # logging left alone


def test_upgrade_twice_is_a_no_op(engine):
    migrate.upgrade(engine)
    migrate.upgrade(engine)
    assert migrate.current(engine) == migrate.head()


def write_as_0001(engine, sessions_exchanges) -> None:
    """Rows exactly as forge-record 0.1 (revision 0001) wrote them."""
    with engine.begin() as conn:
        for session, exchanges in sessions_exchanges:
            row = session_to_dict(session)
            row["user_name"] = row.pop("user")
            conn.execute(sa.text(
                "INSERT INTO sessions (id, harness, harness_version, argv, cwd, user_name, host,"
                " tags, started_at, ended_at, exit_code, record_version) VALUES (:id, :harness,"
                " :harness_version, :argv, :cwd, :user_name, :host, :tags, :started_at,"
                " :ended_at, :exit_code, 1)"),
                row | {"argv": compression.orjson.dumps(row["argv"]).decode(),
                       "tags": compression.orjson.dumps(row["tags"]).decode()})
            for ex in exchanges:
                conn.execute(sa.text(
                    "INSERT INTO exchanges (session_id, seq, dialect, kind, model, method, url,"
                    " status, started_at, tool_calls, flags, record, raw_request, raw_response)"
                    " VALUES (:sid, :seq, :dialect, 'model', 'm', 'POST', :url, :status, :t, 0,"
                    " '[]', :record, :rq, :rs)"),
                    {"sid": session.id, "seq": ex.seq, "dialect": ex.dialect, "url": ex.url,
                     "status": ex.status, "t": ex.started_at,
                     "record": compression.pack(exchange_to_dict(ex)),
                     "rq": compression.compress(ex.raw_request),
                     "rs": compression.compress(ex.raw_response)})


def test_data_written_under_0001_survives_the_upgrade(engine, url):
    migrate.upgrade(engine, "0001")
    assert columns(engine) == COLUMNS_0001
    old = [make_exchange(1), make_exchange(2, raw_request=b"", response=None)]
    write_as_0001(engine, [(make_session("old"), old)])

    assert upgrade_store(url) == ("0001", migrate.head())
    with open_store(url) as store:
        assert list(store.iter_exchanges("old", raw=True)) == old
        assert store.get_exchange("old", 2, raw=True) == old[1]
        assert store.session_summary("old")["status"] == "interrupted"  # it has no end
        new = dataclasses.replace(realistic_exchanges(4)[3], seq=3)  # layout 2, same session
        store.add_exchange("old", new)
        assert list(store.iter_exchanges("old", raw=True)) == [*old, new]


def store_session(url, exchanges) -> None:
    with open_store(url) as store:
        store.add_session(make_session("s"))
        for ex in exchanges:
            store.add_exchange("s", ex)


def test_downgrade_of_the_latest_revision_and_back(engine, url):
    sent = realistic_exchanges(12)
    store_session(url, sent)
    head = migrate.head()

    migrate.downgrade(engine, "-1")

    assert migrate.current(engine) not in (None, head)
    migrate.upgrade(engine)
    assert migrate.current(engine) == head
    with open_store(url) as store:
        assert list(store.iter_exchanges("s", raw=True)) == sent


def test_downgrading_0002_rewrites_every_exchange_as_0001_wrote_it(engine, url):
    sent = realistic_exchanges(40)
    store_session(url, sent)

    migrate.downgrade(engine, "0001")

    assert migrate.current(engine) == "0001"
    # 0007's downgrade adds method and url back after the other columns.
    assert {t: sorted(c) for t, c in columns(engine).items()} == {
        t: sorted(c) for t, c in COLUMNS_0001.items()}
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT seq, record, raw_request, raw_response, method, url FROM exchanges "
            "ORDER BY seq")).all()
    assert [r.seq for r in rows] == [e.seq for e in sent]
    assert [(r.method, r.url) for r in rows] == [(e.method, e.url) for e in sent]
    for row, ex in zip(rows, sent, strict=True):  # what 0001's code reads
        assert compression.unpack(row.record) == compression.orjson.loads(
            compression.orjson.dumps(exchange_to_dict(ex)))
        assert compression.decompress(row.raw_request) == ex.raw_request
        assert compression.decompress(row.raw_response) == ex.raw_response
    migrate.upgrade(engine)
    with open_store(url) as store:
        assert list(store.iter_exchanges("s", raw=True)) == sent


def test_store_from_a_newer_version_is_refused(engine, url):
    migrate.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = '9999'"))
    with pytest.raises(StoreError, match="newer forge-record") as info:
        open_store(url)
    assert "\n" not in str(info.value)


def open_in_processes(url: str, n: int = 4) -> list[int | None]:
    """Exit codes of n processes that open (and so migrate) the store at one moment."""
    # spawn, not fork: pytest runs proxy and writer threads, and a forked child of a
    # multi-threaded process can deadlock on a lock some thread held.
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(n)
    procs = [ctx.Process(target=_open_and_close, args=(url, barrier)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    return [p.exitcode for p in procs]


def _open_and_close(url, barrier) -> None:
    barrier.wait(30)
    open_store(url).close()


def test_concurrent_first_opens_migrate_once(url, engine):
    """Recorders starting together on a fresh store: the lock makes the others wait."""
    assert open_in_processes(url) == [0, 0, 0, 0]
    assert migrate.current(engine) == migrate.head()
    assert {t: columns(engine)[t] for t in EXPECTED_COLUMNS} == EXPECTED_COLUMNS


def test_sqlite_keeps_blob_hashes_once(tmp_path):
    """The blobs table is keyed by its hash (WITHOUT ROWID): no second copy in an index."""
    open_store(default_store_url(tmp_path)).close()
    with sqlite3.connect(tmp_path / "traces.db") as conn:
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'blobs'").fetchone()[0]
    assert "WITHOUT ROWID" in sql


def forge_db(url, *args, home):
    import os
    import subprocess
    import sys
    from pathlib import Path

    forge = str(Path(sys.executable).with_name("forge-record"))
    return subprocess.run([forge, "db", *args, "--store", url], text=True, capture_output=True,
                          env={**os.environ, "FORGE_RECORD_HOME": str(home)}, timeout=120)


def test_db_current_and_upgrade_commands(engine, url, tmp_path):
    migrate.upgrade(engine, "0001")
    before = forge_db(url, "current", home=tmp_path)
    assert before.returncode == 0, before.stderr
    assert "revision 0001" in before.stdout and f"needs {migrate.head()}" in before.stdout
    done = forge_db(url, "upgrade", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"upgraded from revision 0001 to {migrate.head()}" in done.stdout
    assert migrate.current(engine) == migrate.head()
    now = forge_db(url, "current", home=tmp_path).stdout
    assert f"revision {migrate.head()}, up to date" in now
    assert "already at revision" in forge_db(url, "upgrade", home=tmp_path).stdout


def test_db_current_does_not_create_a_sqlite_store(tmp_path):
    url = default_store_url(tmp_path / "nothing-here")
    proc = forge_db(url, "current", home=tmp_path)
    assert proc.returncode == 1 and proc.stderr.startswith("forge-record: no store at ")
    assert not (tmp_path / "nothing-here").exists()


def test_0006_kept_figures_are_dropped_by_its_downgrade_and_found_again(engine, url):
    store_session(url, realistic_exchanges(6))
    with open_store(url) as store:
        store.end_session("s", 2e9, 0)
        store.keep("lineage", {"s": ({"usage": {}, "fingerprints": []}, 6)})
        store.keep("pack_groups", {"s": ({"groups": [1]}, 6)})

    migrate.downgrade(engine, "0005")
    assert "lineage" not in columns(engine)["sessions"]
    migrate.upgrade(engine)

    with open_store(url) as store, store.reading("test") as conn:
        kept = conn.execute(sa.text("SELECT lineage, pack_groups FROM sessions")).one()
        assert tuple(kept) == (None, None)
        assert len(list(store.iter_exchanges("s", raw=True))) == 6


def test_0007_blob_names_become_16_byte_keys_and_a_0006_store_reads_back(engine, url):
    """A store at 0006 names blobs with 35 characters; 0007 keeps their 16 bytes, and every
    exchange reads back byte for byte after the upgrade (and after going back to 0006)."""
    sent = realistic_exchanges(12)
    store_session(url, sent)
    migrate.downgrade(engine, "0006")
    with engine.connect() as conn:
        names = conn.scalars(sa.text("SELECT hash FROM blobs")).all()
    assert names and all(isinstance(n, str) and len(n) == 35 and n.startswith("c1:")
                         for n in names)

    migrate.upgrade(engine)

    with engine.connect() as conn:
        keys = conn.scalars(sa.text("SELECT hash FROM blobs")).all()
    assert sorted(bytes(k) for k in keys) == sorted(bytes.fromhex(n[3:]) for n in names)
    with open_store(url) as store:
        assert list(store.iter_exchanges("s", raw=True)) == sent
        assert store.get_exchange("s", 12, raw=True) == sent[11]
        store.add_exchange("s", dataclasses.replace(sent[0], seq=13))
        assert store.get_exchange("s", 13, raw=True) == dataclasses.replace(sent[0], seq=13)


def test_0007_postgres_keeps_compressed_columns_in_the_row(engine, url):
    migrate.upgrade(engine)
    if engine.dialect.name != "postgresql":
        return
    with engine.connect() as conn:
        storage = dict(conn.execute(sa.text(
            "SELECT attrelid::regclass::text || '.' || attname, attstorage FROM pg_attribute "
            "WHERE attname IN ('record', 'raw_request', 'raw_response', 'data') "
            "AND attrelid IN ('exchanges'::regclass, 'packs'::regclass)")).all())
        options = conn.scalars(sa.text("SELECT reloptions FROM pg_class WHERE relname IN "
                                       "('exchanges', 'packs')")).all()
    assert set(storage.values()) == {"e"} and len(storage) == 4
    assert options == [["toast_tuple_target=8160"]] * 2
    migrate.downgrade(engine, "0006")
    with engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT attstorage FROM pg_attribute WHERE attname = "
                                   "'raw_request' AND attrelid = 'exchanges'::regclass")) == "x"


def test_0007_sqlite_tables_keyed_by_session_lose_their_rowid_and_keep_their_rows(tmp_path):
    url = default_store_url(tmp_path)
    engine = make_engine(url)
    migrate.upgrade(engine, "0006")
    rows = {
        "sessions": "INSERT INTO sessions (id, argv, tags, started_at, record_version) "
                    "VALUES ('s', '[]', '{}', 1.5, 1)",
        "labels": "INSERT INTO labels VALUES ('s', 0.5, 'ok', '{\"a\": 1}', 1.5, 2.5)",
        "gateway_sessions": "INSERT INTO gateway_sessions VALUES ('s', 'h', '{}', 'g', "
                            "'header', 3, 'finished', 0, 9.5, 1, 1.5)",
    }
    with engine.begin() as conn:
        for sql in rows.values():
            conn.execute(sa.text(sql))

    def state():
        with sqlite3.connect(tmp_path / "traces.db") as conn:
            return {t: (conn.execute(f"SELECT * FROM {t}").fetchall(),
                        "WITHOUT ROWID" in conn.execute("SELECT sql FROM sqlite_master WHERE "
                                                        "name = ?", (t,)).fetchone()[0],
                        sorted(n for (n,) in conn.execute(
                            "SELECT name FROM sqlite_master WHERE type = 'index' AND "
                            "tbl_name = ?", (t,))))
                    for t in ("labels", "gateway_sessions")}

    before = state()
    migrate.upgrade(engine)
    after = state()
    assert {t: a[0] for t, a in after.items()} == {t: b[0] for t, b in before.items()}
    assert not any(b[1] for b in before.values()) and all(a[1] for a in after.values())
    assert "ix_gateway_sessions__group_id" in after["gateway_sessions"][2]
    assert after["labels"][2] == []  # the key is the table
    assert migrate.drift(engine) == []
    migrate.downgrade(engine, "0006")
    assert state() == before
    engine.dispose()


def test_new_sqlite_store_is_compact(tmp_path):
    """A new SQLite file (issue 21 item 1): every table keyed by text is its own key (0007,
    0008), the version table has no index of its own, and the file is packed once made
    (its migrations copied tables and left the schema over 3 pages): VACUUM finds nothing
    to give back."""
    open_store(default_store_url(tmp_path)).close()
    with sqlite3.connect(tmp_path / "traces.db") as conn:
        sql = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
        autoindexes = {name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 'sqlite_autoindex_%'")}
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        conn.execute("VACUUM")
        packed = conn.execute("PRAGMA page_count").fetchone()[0]
    assert all("WITHOUT ROWID" in sql[t] for t in ("sessions", "labels", "gateway_sessions",
                                                 "blobs"))
    assert not any(migrate.VERSION_TABLE in name or "sessions_1" in name
                   for name in autoindexes)
    assert (free, pages) == (0, packed)


def test_0008_sqlite_sessions_lose_their_rowid_and_keep_every_exchange(engine, url):
    """0008 copies SQLite's `sessions`, which exchanges, labels and gateway sessions point
    at: with foreign keys on, dropping the old table would cascade-delete them. A store at
    0007 reads back byte for byte after the upgrade, and after going back to 0007."""
    sent = realistic_exchanges(12)
    store_session(url, sent)
    with open_store(url) as store:
        store.add_session(make_session("t"))
        store.label_session("s", reward=0.5, note="ok")
    migrate.downgrade(engine, "0007")

    def state():
        with engine.connect() as conn:
            counts = {t: conn.scalar(sa.text(f"SELECT count(*) FROM {t}"))
                      for t in ("sessions", "exchanges", "labels")}
            sql = (conn.scalar(sa.text("SELECT sql FROM sqlite_master WHERE name = 'sessions'"))
                   if engine.dialect.name == "sqlite" else "")
        return counts, "WITHOUT ROWID" in sql

    assert state() == ({"sessions": 2, "exchanges": 12, "labels": 1}, False)
    migrate.upgrade(engine)
    assert state() == ({"sessions": 2, "exchanges": 12, "labels": 1},
                       engine.dialect.name == "sqlite")
    assert migrate.drift(engine) == []
    with open_store(url) as store:
        assert list(store.iter_exchanges("s", raw=True)) == sent
        assert store.get_exchange("s", 12, raw=True) == sent[11]
        assert store.get_label("s")["note"] == "ok"
        store.add_exchange("s", dataclasses.replace(sent[0], seq=13))
        assert store.get_exchange("s", 13, raw=True) == dataclasses.replace(sent[0], seq=13)
    with engine.connect() as conn:  # the foreign keys are on again, and cascade
        conn.execute(sa.text("DELETE FROM sessions WHERE id = 's'"))
        assert conn.scalar(sa.text("SELECT count(*) FROM exchanges")) == 0
        assert conn.scalar(sa.text("SELECT count(*) FROM labels")) == 0
        conn.rollback()
    migrate.downgrade(engine, "0007")
    assert state() == ({"sessions": 2, "exchanges": 13, "labels": 1}, False)


def test_0009_fences_older_gcs_and_its_downgrade_forgets_the_groups_writers_kept(engine, url):
    """An older gc's repacks take no lock against writers that keep pack groups (0009): it
    must not run on the store, and after a downgrade it must trust no figure they kept."""
    store_session(url, realistic_exchanges(6))
    with open_store(url) as store, store.reading("test") as conn:
        assert conn.scalar(sa.text("SELECT pack_groups FROM sessions"))  # the writer kept it
    migrate.downgrade(engine, "0008")
    with engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT pack_groups FROM sessions")) is None
    migrate.upgrade(engine)
    with open_store(url) as store:
        assert len(list(store.iter_exchanges("s", raw=True))) == 6


def test_0010_downgrade_writes_manifest_streams_without_the_dictionary(engine, url):
    """Manifest streams start from the shipped dictionary (0010); going back re-encodes
    them without it, to the same plain manifests, which raw responses are compressed
    against."""
    sent = realistic_exchanges(6)
    store_session(url, sent)
    pieces = sa.text("SELECT record FROM exchanges ORDER BY segment, piece")
    with engine.connect() as conn:
        before = [r for (r,) in conn.execute(pieces)]
    assert compression.trained_id(before[0]) == compression.MANIFESTS
    migrate.downgrade(engine, "0009")
    with engine.connect() as conn:
        after = [r for (r,) in conn.execute(pieces)]
    assert compression.trained_id(after[0]) == 0
    assert compression.decode_pieces(after) == compression.decode_pieces(before)
    migrate.upgrade(engine)
    with open_store(url) as store:
        assert list(store.iter_exchanges("s", raw=True)) == sent


def test_0010_downgrade_refuses_a_store_whose_segments_go_on_from_earlier_ones(
        engine, url, monkeypatch):
    from forge_record.store import batch
    from forge_record.store.items import AddExchange

    monkeypatch.setattr(batch, "ENCODER_BYTES", 1)  # a segment a call, each from the last
    sent = realistic_exchanges(12)
    with open_store(url) as store:
        for name in ("a", "b"):
            store.add_session(make_session(name))
        for ex in sent:
            store.write([AddExchange("a", ex)])
            store.write([AddExchange("b", ex)])
    with pytest.raises(StoreError, match="2 sessions have exchanges that go on from an earl"):
        migrate.downgrade(engine, "0009")
    assert migrate.current(engine) == migrate.head()
    with open_store(url) as store:
        assert list(store.iter_exchanges("a", raw=True)) == sent


# Revisions an older forge-record cannot read past, each with a session only it can read: its
# downgrade refuses, in one line, and leaves the store as it was. (revision, session, error)
REFUSED_DOWNGRADES = {
    # Older forge-records read a system prompt as one blob name (0011 names it in parts)...
    "0011, system in parts": ("0011", lambda: billed(realistic_exchanges(6)),
                              "1 sessions have system prompts stored in parts"),
    # ... and parameters as one blob name (0012 names them as changes) ...
    "0012, parameters as changes": ("0012", lambda: stamped(realistic_exchanges(6)),
                                    "1 sessions have parameters stored as changes"),
    # ... and know only the b"W" rendering (0013 adds b"G", b"C" and b"R").
    **{f"0013, {name}": ("0013", made, "1 sessions have raw requests compressed against a")
       for name, made in (("gemini", gemini_exchanges), ("chat", chat_exchanges),
                          ("responses", responses_exchanges))},
}


@pytest.mark.parametrize("case", REFUSED_DOWNGRADES)
def test_a_downgrade_refuses_a_store_only_its_revision_reads(engine, url, case):
    revision, made, error = REFUSED_DOWNGRADES[case]
    sent = made()
    store_session(url, sent)
    with pytest.raises(StoreError, match=error):
        migrate.downgrade(engine, f"{int(revision) - 1:04d}")
    assert migrate.current(engine) == migrate.head()
    with open_store(url) as store:
        assert list(store.iter_exchanges("s", raw=True)) == sent


def test_0014_downgrade_refuses_a_store_with_sealed_segments(engine, url):
    sent = realistic_exchanges(6)
    store_session(url, sent)
    migrate.downgrade(engine, "0013")  # nothing sealed yet: the session is still going
    migrate.upgrade(engine)
    with open_store(url) as store:  # the writer of the next one seals its segment at its end
        store.add_session(make_session("t"))
        for ex in sent:
            store.add_exchange("t", ex)
        store.end_session("t", 1_760_000_100.0, 0)
    with pytest.raises(StoreError, match="1 sessions have sealed segments"):
        migrate.downgrade(engine, "0013")
    assert migrate.current(engine) == migrate.head()
    with open_store(url) as store:
        assert list(store.iter_exchanges("s", raw=True)) == sent


def test_0015_downgrade_fills_the_dropped_columns_back_from_the_records(engine, url):
    sent = realistic_exchanges(6)
    sent[2] = dataclasses.replace(sent[2], status="error", http_status=529, first_byte_at=None,
                                  flags=["upstream_error"])
    with open_store(url) as store:  # one session sealed, one still going
        for name in ("ended", "going"):
            store.add_session(make_session(name))
            for ex in sent:
                store.add_exchange(name, ex)
        store.end_session("ended", 1_760_000_100.0, 0)
    migrate.downgrade(engine, "0014")
    query = sa.text("SELECT status, http_status, first_byte_at, ended_at, flags FROM exchanges "
                    "WHERE session_id = :s ORDER BY seq")
    with engine.connect() as conn:
        for name in ("ended", "going"):
            found = [(r[0], r[1], r[2], r[3], r[4] if isinstance(r[4], list) else
                      json.loads(r[4])) for r in conn.execute(query, {"s": name})]
            assert found == [(ex.status, ex.http_status, ex.first_byte_at, ex.ended_at,
                              list(ex.flags)) for ex in sent]
    migrate.upgrade(engine)
    with open_store(url) as store:
        for name in ("ended", "going"):
            assert list(store.iter_exchanges(name, raw=True)) == sent
