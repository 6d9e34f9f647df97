"""forge_record.store.Writer against a real SQLite store: order, draining, failures, drops."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

import pytest

from forge_record.records import Exchange, Session
from forge_record.store import Writer, default_store_url, open_store


@pytest.fixture
def url(tmp_path):
    return default_store_url(tmp_path)


def seqs_in_write_order(tmp_path) -> list[int]:
    with sqlite3.connect(tmp_path / "traces.db") as conn:
        return [seq for (seq,) in conn.execute("SELECT seq FROM exchanges ORDER BY id")]


def exchange(seq: int) -> Exchange:
    return Exchange(dialect="anthropic.messages", seq=seq, raw_request=b"x" * 1000)


def test_writes_land_in_submission_order(url, tmp_path):
    writer = Writer(open_store(url))
    writer.submit_session(Session(id="s", started_at=1.0))
    order = [5, 3, 9, 0, 1, 8, 2, 7, 6, 4]
    for seq in order:
        writer.submit_exchange("s", exchange(seq))
    writer.submit_end("s", 2.0, 0)
    writer.close()
    assert (writer.written, writer.failed, writer.dropped) == (12, 0, 0)
    assert seqs_in_write_order(tmp_path) == order
    with open_store(url) as store:
        assert store.get_session("s").exit_code == 0


def test_close_drains_the_queue(url, tmp_path):
    writer = Writer(open_store(url))
    writer.submit_session(Session(id="s"))
    for seq in range(500):
        writer.submit_exchange("s", exchange(seq))
    writer.close()  # right away: everything queued must still be written
    assert writer.written == 501
    assert seqs_in_write_order(tmp_path) == list(range(500))


def test_a_failing_write_is_logged_counted_and_skipped(url, tmp_path, caplog):
    writer = Writer(open_store(url))
    writer.submit_session(Session(id="s"))
    writer.submit_exchange("s", exchange(0))
    writer.submit_exchange("no-such-session", exchange(1))  # foreign key violation, for real
    writer.submit_exchange("s", exchange(2))
    with caplog.at_level(logging.ERROR, logger="forge_record"):
        writer.close()
    assert (writer.written, writer.failed) == (3, 1)
    assert seqs_in_write_order(tmp_path) == [0, 2]
    [failure] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "exchange 1 of session no-such-session" in failure.getMessage()
    assert failure.exc_info is not None


def test_full_queue_drops_and_warns_without_blocking(url, tmp_path, caplog):
    writer = Writer(open_store(url), maxsize=1)
    locker = sqlite3.connect(tmp_path / "traces.db", isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # hold the write lock: the writer thread must wait
    try:
        writer.submit_session(Session(id="s"))
        deadline = time.monotonic() + 5
        while writer._queue.qsize() and time.monotonic() < deadline:
            time.sleep(0.01)  # until the writer has taken the session and is blocked on it
        with caplog.at_level(logging.WARNING, logger="forge_record"):
            started = time.monotonic()
            for seq in range(3):
                writer.submit_exchange("s", exchange(seq))  # 0 is queued, 1 and 2 are dropped
            assert time.monotonic() - started < 0.5
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    writer.close()
    assert (writer.written, writer.failed, writer.dropped) == (2, 0, 2)
    assert seqs_in_write_order(tmp_path) == [0]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("dropped exchange 2 of session s" in w for w in warnings)


def test_submit_after_close_is_dropped_not_raised(url):
    writer = Writer(open_store(url))
    writer.close()
    writer.submit_session(Session(id="late"))
    writer.close()  # a second close is harmless
    assert writer.dropped == 1


def test_prepare_runs_in_the_writer_thread(url):
    threads = []

    def prepare(ex: Exchange) -> Exchange:
        threads.append(threading.current_thread().name)
        ex.flags.append("prepared")
        return ex

    writer = Writer(open_store(url), prepare=prepare)
    writer.submit_session(Session(id="s"))
    writer.submit_exchange("s", exchange(0))
    writer.close()
    assert threads == ["forge-record-writer"]
    with open_store(url) as store:
        assert [ex.flags for ex in store.iter_exchanges("s")] == [["prepared"]]


def test_a_failing_prepare_stores_the_exchange_as_captured(url, caplog):
    def prepare(ex: Exchange) -> Exchange:
        raise ValueError("cannot parse")

    writer = Writer(open_store(url), prepare=prepare)
    writer.submit_session(Session(id="s"))
    writer.submit_exchange("s", exchange(0))
    with caplog.at_level(logging.ERROR, logger="forge_record"):
        writer.close()
    assert (writer.written, writer.failed) == (2, 0)
    assert "could not prepare exchange 0 of session s" in caplog.text
    with open_store(url) as store:
        [stored] = store.iter_exchanges("s", raw=True)
        assert stored.raw_request == exchange(0).raw_request


def test_end_sets_harness_version_only_when_known(url):
    writer = Writer(open_store(url))
    writer.submit_session(Session(id="a", harness_version="1.0"))
    writer.submit_session(Session(id="b"))
    writer.submit_end("a", 2.0, 1)
    writer.submit_end("b", 3.0, None, harness_version="2.1.3")
    writer.close()
    with open_store(url) as store:
        a, b = store.get_session("a"), store.get_session("b")
    assert (a.ended_at, a.exit_code, a.harness_version) == (2.0, 1, "1.0")
    assert (b.ended_at, b.exit_code, b.harness_version) == (3.0, None, "2.1.3")
