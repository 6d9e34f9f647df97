"""The alembic tree: one head, the exact schema it builds, and how stores get migrated."""

from __future__ import annotations

import logging
import multiprocessing
import sqlite3

import pytest

from forge_record.errors import StoreError
from forge_record.store import default_store_url, migrate, open_store
from forge_record.store.engine import make_engine

EXPECTED_COLUMNS = {
    "sessions": [
        "id", "harness", "harness_version", "argv", "cwd", "user_name", "host", "tags",
        "started_at", "ended_at", "exit_code", "record_version",
    ],
    "exchanges": [
        "id", "session_id", "seq", "dialect", "kind", "model", "method", "url", "status",
        "http_status", "started_at", "first_byte_at", "ended_at", "input_tokens",
        "output_tokens", "cache_read_tokens", "cache_write_tokens", "tool_calls", "flags",
        "record", "raw_request", "raw_response",
    ],
    migrate.VERSION_TABLE: ["version_num"],
}
EXPECTED_INDEXES = {"ix_sessions__started_at", "sqlite_autoindex_exchanges_1"}


@pytest.fixture
def engine(tmp_path):
    engine = make_engine(default_store_url(tmp_path))
    yield engine
    engine.dispose()


def sqlite_columns(path) -> dict[str, list[str]]:
    with sqlite3.connect(path) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: [c[1] for c in conn.execute(f"PRAGMA table_info({t})")] for t in tables}


def test_single_head():
    assert migrate.heads() == [migrate.head()]


def test_upgrade_of_a_blank_sqlite_builds_exactly_the_schema(engine, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no alembic.ini here: programmatic use must not need one
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    assert migrate.current(engine) is None

    migrate.upgrade(engine)

    assert migrate.current(engine) == migrate.head()
    assert sqlite_columns(tmp_path / "traces.db") == EXPECTED_COLUMNS
    with sqlite3.connect(tmp_path / "traces.db") as conn:
        indexes = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert EXPECTED_INDEXES <= indexes
        assert "uq_exchanges__session_id_seq" in conn.execute(
            "SELECT sql FROM sqlite_master WHERE name='exchanges'").fetchone()[0]
    assert migrate.drift(engine) == []  # the migration and schema.py agree
    assert (root.handlers, root.level) == (handlers, level)  # logging left alone


def test_upgrade_twice_is_a_no_op(engine):
    migrate.upgrade(engine)
    migrate.upgrade(engine)
    assert migrate.current(engine) == migrate.head()


def open_in_processes(url: str, n: int = 4) -> list[int | None]:
    """Exit codes of n forked processes that open (and so migrate) the store at one moment."""
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


def test_concurrent_first_opens_migrate_once(tmp_path):
    """Recorders starting together on a fresh store: the lock makes the others wait."""
    assert open_in_processes(default_store_url(tmp_path)) == [0, 0, 0, 0]
    assert sqlite_columns(tmp_path / "traces.db") == EXPECTED_COLUMNS


def test_store_from_a_newer_version_is_refused(engine, tmp_path):
    migrate.upgrade(engine)
    with sqlite3.connect(tmp_path / "traces.db") as conn:
        conn.execute(f"UPDATE {migrate.VERSION_TABLE} SET version_num = '9999'")
    with pytest.raises(StoreError, match="newer forge-record") as info:
        open_store(default_store_url(tmp_path))
    assert "\n" not in str(info.value)
