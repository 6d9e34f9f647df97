"""forge_record.store.Writer against real stores (SQLite and Postgres): order, batching,
draining, failures, drops, prepare, heartbeat, and what a SIGKILL loses."""


from __future__ import annotations

import logging
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa

from forge_record.records import Exchange, Session
from forge_record.store import Writer, default_store_url, open_store


@pytest.fixture
def url(store_url):
    return store_url


def writer_for(url, **kw) -> Writer:
    return Writer(open_store(url), **kw)


def seqs_in_write_order(url) -> list[int]:
    with open_store(url) as store, store.reading("read") as conn:
        return list(conn.scalars(sa.text("SELECT seq FROM exchanges ORDER BY id")))


def exchange(seq: int) -> Exchange:
    return Exchange(dialect="anthropic.messages", seq=seq, raw_request=b"x" * 1000)


def test_writes_land_in_submission_order(url):
    writer = writer_for(url)
    writer.submit_session(Session(id="s", started_at=1.0))
    order = [5, 3, 9, 0, 1, 8, 2, 7, 6, 4]
    for seq in order:
        writer.submit_exchange("s", exchange(seq))
    writer.submit_end("s", 2.0, 0)
    writer.close()
    assert (writer.written, writer.failed, writer.dropped, writer.spooled) == (12, 0, 0, 0)
    assert seqs_in_write_order(url) == order
    with open_store(url) as store:
        assert store.get_session("s").exit_code == 0
        assert [e.raw_request for e in store.iter_exchanges("s", raw=True)] == [b"x" * 1000] * 10


def test_close_drains_the_queue(url):
    writer = writer_for(url)
    writer.submit_session(Session(id="s"))
    for seq in range(500):
        writer.submit_exchange("s", exchange(seq))
    writer.close()  # right away: everything queued must still be written
    assert writer.written == 501
    assert seqs_in_write_order(url) == list(range(500))


def test_what_queues_up_is_written_in_batches(url):
    """While a write is slow, submissions pile up; the next transaction takes them all."""
    gate = threading.Event()

    def prepare(_sid: str, ex: Exchange) -> Exchange:
        gate.wait(10)  # the writer thread is busy with the first exchange meanwhile
        return ex

    writer = writer_for(url, prepare=prepare)
    writer.submit_session(Session(id="s"))
    for seq in range(200):
        writer.submit_exchange("s", exchange(seq))
    gate.set()
    writer.close()
    assert writer.written == 201
    assert writer.batches <= 6  # 64 items per transaction at most
    assert seqs_in_write_order(url) == list(range(200))


def test_a_failing_write_is_logged_counted_and_skipped(url, caplog):
    writer = writer_for(url)
    writer.submit_session(Session(id="s"))
    writer.submit_exchange("s", exchange(0))
    writer.submit_exchange("no-such-session", exchange(1))  # foreign key violation, for real
    writer.submit_exchange("s", exchange(2))
    with caplog.at_level(logging.ERROR, logger="forge_record"):
        writer.close()
    assert (writer.written, writer.failed, writer.spooled) == (3, 1, 0)
    assert seqs_in_write_order(url) == [0, 2]
    [failure] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "exchange 1 of session no-such-session" in failure.getMessage()
    assert failure.exc_info is not None


def test_submit_after_close_is_dropped_not_raised(url):
    writer = writer_for(url)
    writer.close()
    writer.submit_session(Session(id="late"))
    writer.close()  # a second close is harmless
    assert writer.dropped == 1


def test_prepare_runs_in_the_writer_thread(url):
    threads = []

    def prepare(_sid: str, ex: Exchange) -> Exchange:
        threads.append(threading.current_thread().name)
        ex.flags.append("prepared")
        return ex

    writer = writer_for(url, prepare=prepare)
    writer.submit_session(Session(id="s"))
    writer.submit_exchange("s", exchange(0))
    writer.close()
    assert threads == ["forge-record-writer"]
    with open_store(url) as store:
        assert [ex.flags for ex in store.iter_exchanges("s")] == [["prepared"]]


def test_a_prepare_about_to_wait_has_what_is_in_hand_written_first(url):
    """A prepare that must wait for another writer (store.responses: a previous response
    another `serve` replica stores) first has the batch's prepared items written, since that
    other writer may be waiting for one of them; the item being prepared, and the rest of
    the batch, are written after it, nothing lost or repeated, in order."""
    held_then: list[list[int]] = []
    writer: Writer

    def prepare(_sid: str, ex: Exchange) -> Exchange:
        if ex.seq == 2:
            writer.write_in_hand()
            held_then.append(seqs_in_write_order(url))
        return ex

    writer = writer_for(url, prepare=prepare, gather=0.5)  # all in one batch
    writer.submit_session(Session(id="s"))
    for seq in range(4):
        writer.submit_exchange("s", exchange(seq))
    writer.close()
    assert held_then == [[0, 1]]
    assert seqs_in_write_order(url) == [0, 1, 2, 3]
    assert (writer.written, writer.durable, writer.batches) == (5, 5, 2)


def test_write_in_hand_from_another_thread_writes_nothing(url):
    writer = writer_for(url)
    writer.write_in_hand()  # the spiller's prepare or close's: only the writer thread writes
    writer.close()
    assert writer.batches == 0


def test_a_failing_prepare_stores_the_exchange_as_captured(url, caplog):
    def prepare(_sid: str, ex: Exchange) -> Exchange:
        raise ValueError("cannot parse")

    writer = writer_for(url, prepare=prepare)
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
    writer = writer_for(url)
    writer.submit_session(Session(id="a", harness_version="1.0"))
    writer.submit_session(Session(id="b"))
    writer.submit_end("a", 2.0, 1)
    writer.submit_end("b", 3.0, None, harness_version="2.1.3")
    writer.close()
    with open_store(url) as store:
        a, b = store.get_session("a"), store.get_session("b")
    assert (a.ended_at, a.exit_code, a.harness_version) == (2.0, 1, "1.0")
    assert (b.ended_at, b.exit_code, b.harness_version) == (3.0, None, "2.1.3")


def heartbeat_of(url, session_id) -> float:
    with open_store(url) as store, store.reading("read") as conn:
        return conn.scalar(sa.text("SELECT heartbeat_at FROM sessions WHERE id = :id"),
                           {"id": session_id})


def test_an_idle_writer_keeps_its_sessions_alive(url):
    writer = writer_for(url, heartbeat_every=0.1)
    writer.submit_session(Session(id="s"))
    writer.submit_session(Session(id="done"))
    writer.submit_end("done", 1.0, 0)
    deadline = time.monotonic() + 10
    while writer.written < 3:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    first, ended = heartbeat_of(url, "s"), heartbeat_of(url, "done")
    time.sleep(0.5)
    assert heartbeat_of(url, "s") > first  # only the session still recording
    assert heartbeat_of(url, "done") == ended
    with open_store(url) as store:
        assert store.session_summary("s")["status"] == "recording"
    writer.close()


# --- SQLite only -------------------------------------------------------------------------


def test_a_full_queue_overflows_to_the_spool_and_is_written_in_order(tmp_path, caplog):
    url = default_store_url(tmp_path)
    writer = writer_for(url, maxsize=2, spool_dir=tmp_path / "spool")
    locker = sqlite3.connect(tmp_path / "traces.db", isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # hold the write lock: the writer thread must wait
    try:
        writer.submit_session(Session(id="s"))
        deadline = time.monotonic() + 5
        while writer._queue and time.monotonic() < deadline:
            time.sleep(0.01)  # until the writer has taken the session and is blocked on it
        with caplog.at_level(logging.WARNING, logger="forge_record"):
            for seq in range(6):  # 0 and 1 are queued, 2 to 5 overflow
                writer.submit_exchange("s", exchange(seq))
            deadline = time.monotonic() + 5
            while writer.overflowed < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
        # spooled while the store is still locked: on disk, not waiting in memory
        assert writer.overflowed == 4
        assert writer.spool_path is not None and writer.spool_path.exists()
        assert writer.written == 0
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    writer.close()
    assert (writer.written, writer.failed, writer.dropped, writer.replayed) == (3, 0, 0, 4)
    assert seqs_in_write_order(url) == [0, 1, 2, 3, 4, 5]
    assert writer.spool_left == 0 and not list((tmp_path / "spool").glob("*.spool"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("spooling exchange 2 of session s" in w for w in warnings)


def test_after_an_overflow_new_items_queue_again(tmp_path):
    url = default_store_url(tmp_path)
    writer = writer_for(url, maxsize=1, spool_dir=tmp_path / "spool")
    locker = sqlite3.connect(tmp_path / "traces.db", isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    writer.submit_session(Session(id="s"))
    for seq in range(4):
        writer.submit_exchange("s", exchange(seq))
    locker.execute("ROLLBACK")
    locker.close()
    deadline = time.monotonic() + 10
    while writer._overflowing and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not writer._overflowing  # caught up: the spool was written, the queue is used again
    writer.submit_exchange("s", exchange(4))
    writer.close()
    assert writer.overflowed >= 1 and writer.spooled == 0
    assert seqs_in_write_order(url) == [0, 1, 2, 3, 4]


KILLED_RECORDER = """
import sys, time
from forge_record.records import Exchange, Session
from forge_record.store import Writer, open_store
writer = Writer(open_store(sys.argv[1]))
writer.submit_session(Session(id="s", host=__import__("socket").gethostname()))
for seq in range(1000):
    writer.submit_exchange("s", Exchange(dialect="d", seq=seq, raw_request=b"q" * 5000))
    print(seq, flush=True)
    time.sleep(0.02)
"""


@pytest.mark.slow
def test_a_sigkilled_recorder_loses_at_most_the_exchange_in_flight(tmp_path):
    url = default_store_url(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", KILLED_RECORDER, url],
                             stdout=subprocess.PIPE, text=True)
    submitted = -1
    while submitted < 40:
        submitted = int(child.stdout.readline())
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    submitted = max([submitted, *(int(line) for line in child.stdout.read().split())])
    with open_store(url) as store:
        stored = sorted(store.seqs("s"))
        assert stored == list(range(len(stored)))  # no holes
        assert len(stored) >= submitted  # at most the one in flight is missing
        assert store.session_summary("s")["status"] == "interrupted"
        assert all(e.raw_request == b"q" * 5000 for e in store.iter_exchanges("s", raw=True))


def test_large_exchanges_are_prepared_a_few_megabytes_at_a_time(tmp_path):
    # A batch is prepared whole, and a prepared exchange is several times its captured size:
    # 64 exchanges of ~105 KB at once took the writer process past 400 MB (issue 19).
    from forge_record.store import spool as spooling
    from forge_record.store import writer as writing
    from forge_record.store.items import AddExchange

    big = [AddExchange("s", Exchange(dialect="d", seq=n, raw_request=b"x" * (1 << 20)))
           for n in range(20)]
    batch = writing._batch(writing.deque(enumerate(big)), writing.BATCH)
    assert 1 <= len(batch) <= writing.BATCH_BYTES >> 20
    spool = spooling.Spool(tmp_path, "fp")
    spool.append(big)
    path = spool.path
    spool.close()
    sizes = []
    assert spooling.replay_file(path, lambda items: sizes.append(len(items))) == 20
    assert max(sizes) <= spooling.REPLAY_BYTES >> 20
