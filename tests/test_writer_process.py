"""forge_record.writer_process: the store writer in a child process, fed through a pipe.

What `forge-record run` relies on: items sent are folded, redacted and stored by the child;
a store that cannot be opened fails at `ready()` with its message; the counters come back
at close; and a recorder SIGKILLed right after handing over an exchange loses nothing."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from support import SECRET, captured

from forge_record.errors import StoreError
from forge_record.records import Session
from forge_record.store import Writer, default_store_url, open_store
from forge_record.store import gateway as gateway_rows
from forge_record.store.items import AddExchange
from forge_record.writer_process import WriterProcess, frame, read_batches


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_RECORD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_items_are_folded_redacted_and_stored(tmp_path, home):
    url = default_store_url(tmp_path)
    writer = WriterProcess(url)
    writer.ready()
    writer.submit_session(Session(id="s", started_at=1.0))
    for seq in (1, 2):
        writer.submit_exchange("s", captured(seq))
    writer.submit_end("s", 2.0, 0)
    writer.close()
    assert (writer.written, writer.failed, writer.dropped, writer.spool_left) == (4, 0, 0, 0)
    with open_store(url) as store:
        exchanges = list(store.iter_exchanges("s", raw=True))
        assert [e.seq for e in exchanges] == [1, 2]
        for ex in exchanges:
            assert ex.status == "complete"
            assert ex.response.content[0].text == "hello"
            assert SECRET not in ex.request.messages[0].content[0].text
            assert SECRET.encode() not in ex.raw_request
        assert store.get_session("s").exit_code == 0
    assert SECRET.encode() not in (tmp_path / "traces.db").read_bytes()


def test_a_store_that_cannot_be_opened_fails_at_ready(tmp_path, home):
    writer = WriterProcess("nosuch://x")
    with pytest.raises(StoreError, match="unsupported store URL"):
        writer.ready()
    writer.submit_exchange("s", captured(1))  # quietly nothing: it never started
    writer.close()
    assert writer.dropped == 0


KILLED = """
import os, signal, sys, time
from forge_record.records import Session
from forge_record.writer_process import WriterProcess
sys.path.insert(0, sys.argv[2])
from support import captured
writer = WriterProcess(sys.argv[1])
print(writer._proc.pid, flush=True)
writer.ready()
writer.submit_session(Session(id="s", host=__import__("socket").gethostname()))
for seq in range(50):
    writer.submit_exchange("s", captured(seq))
assert writer.sent == 51  # in the pipe as soon as submitted: no thread had to run first
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_a_recorder_killed_right_after_handing_over_loses_nothing(tmp_path, home):
    url = default_store_url(tmp_path)
    recorder = subprocess.Popen([sys.executable, "-c", KILLED, url, os.path.dirname(__file__)],
                                stdout=subprocess.PIPE, text=True)
    child = int(recorder.stdout.readline())
    assert recorder.wait(60) == -signal.SIGKILL
    deadline = time.monotonic() + 60
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the writer process did not end after its recorder died"
    with open_store(url) as store:
        assert sorted(store.seqs("s")) == list(range(50))
        assert store.session_summary("s")["status"] == "interrupted"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (its parent is gone but init has not reaped it yet) counts as ended
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_writer_runs_as_batch_work_below_the_recorder_s_priority(tmp_path, home):
    writer = WriterProcess(default_store_url(tmp_path))
    writer.ready()  # the child has set its priority before it says ready
    try:
        child = os.getpriority(os.PRIO_PROCESS, writer._proc.pid)
        assert child == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)
        if hasattr(os, "SCHED_BATCH"):
            assert os.sched_getscheduler(writer._proc.pid) == os.SCHED_BATCH
    finally:
        writer.close()


def test_serve_s_writer_is_batch_work_at_the_recorder_s_own_priority(tmp_path, home):
    # It numbers calls as they start, so it is not niced (a niced thread holding the GIL
    # would hold up the numbering), but it must not preempt the proxy when an item wakes it.
    writer = WriterProcess(default_store_url(tmp_path), number_calls=True)
    writer.ready()
    try:
        child = os.getpriority(os.PRIO_PROCESS, writer._proc.pid)
        assert child == os.getpriority(os.PRIO_PROCESS, 0)
        if hasattr(os, "SCHED_BATCH"):
            assert os.sched_getscheduler(writer._proc.pid) == os.SCHED_BATCH
    finally:
        writer.close()


def test_the_writer_maps_its_large_blocks_so_that_dropped_encoders_are_given_back(
        tmp_path, home, monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    writer = WriterProcess(default_store_url(tmp_path), number_calls=True)
    writer.ready()
    try:
        with open(f"/proc/{writer._proc.pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        assert b"MALLOC_MMAP_THRESHOLD_=1048576" in env
        # and keeps freed request bodies at the top of its heap for the next ones
        assert b"MALLOC_TRIM_THRESHOLD_=4194304" in env
    finally:
        writer.close()


def test_a_stalled_writer_never_blocks_a_submit_and_loses_nothing(tmp_path, home):
    # The child is stopped, so the pipe fills: the frames that do not fit wait in memory
    # for the sender thread, and go in order once the child reads again.
    url = default_store_url(tmp_path)
    writer = WriterProcess(url)
    writer.ready()
    big = [captured(seq) for seq in range(60)]
    for ex in big:
        ex.raw_response += b": " + b"x" * (64 << 10) + b"\n\n"  # an SSE comment: 64 KB
    os.kill(writer._proc.pid, signal.SIGSTOP)
    try:
        submits = threading.Thread(target=lambda: [writer.submit_session(Session(id="s")),
                                                   *(writer.submit_exchange("s", ex)
                                                     for ex in big)])
        submits.start()
        submits.join(30)
        assert not submits.is_alive(), "a submit blocked on the stopped writer"
        assert writer.sent < 61  # the pipe (at most 1 MiB) could not take 3.9 MB
    finally:
        os.kill(writer._proc.pid, signal.SIGCONT)
    writer.close()
    assert (writer.sent, writer.written, writer.dropped, writer.failed) == (61, 61, 0, 0)
    with open_store(url) as store:
        assert [e.seq for e in store.iter_exchanges("s")] == list(range(60))


def test_serve_s_calls_are_numbered_by_the_child_as_they_started(tmp_path, home):
    """`serve` hands over each call's start and its exchange (store.numbering): the child
    numbers calls in the order they started, and an item is `settled` only once the child
    has taken care of it (here: not while the child is stopped)."""
    url = default_store_url(tmp_path)
    with open_store(url) as store, store.transaction("create") as conn:
        gateway_rows.create(conn, Session(id="g", started_at=1.0), "frs_t", {})
    writer = WriterProcess(url, number_calls=True)
    writer.ready()
    os.kill(writer._proc.pid, signal.SIGSTOP)
    try:
        writer.submit_start("g", "r-1")
        writer.submit_start("g", "r-2")
        last = writer.submit_exchange("g", captured(0), numbered=False, call="r-2")
        time.sleep(0.3)
        assert not writer.settled(last) and writer.unsettled() == 3
    finally:
        os.kill(writer._proc.pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while not writer.settled(last) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer.settled(last) and writer.unsettled() == 0
    with open_store(url) as store:
        assert [e.seq for e in store.iter_exchanges("g")] == [2]  # the second call's
        with store.reading("missing") as conn:
            assert gateway_rows.missing_calls(conn, "g") == [1]  # the first is in flight
    writer.submit_exchange("g", captured(0), numbered=False, call="r-1")
    writer.close()
    assert (writer.written, writer.failed) == (2, 0)  # the starts were numbered, not written
    with open_store(url) as store:
        assert sorted(e.seq for e in store.iter_exchanges("g")) == [1, 2]


def test_the_reader_takes_whole_frames_in_batches_and_drops_a_torn_last_one(caplog):
    frames = [frame(AddExchange("s", captured(seq))) for seq in range(5)]
    data = b"".join(frames) + frames[0][:10]  # the recorder died in the middle of a frame
    read, write = os.pipe()
    writing = threading.Thread(target=lambda: [os.write(write, data[i:i + 7])
                                                for i in range(0, len(data), 7)] and
                               os.close(write))
    writing.start()
    batches = list(read_batches(read, gather=0.01))
    writing.join()
    os.close(read)
    assert [i.exchange.seq for batch in batches for i in batch] == list(range(5))
    assert all(batches)  # no empty batch is handed on
    assert "cut short" in caplog.text


@pytest.mark.parametrize(("every", "count", "fewest", "most"),
                         [(0.005, 40, 1, 2), (0.4, 6, 5, 6)])
def test_the_reader_pauses_only_where_the_pipe_would_not_fill(monkeypatch, every, count,
                                                              fewest, most):
    """A pause before each batch gathers a slow recorder's exchanges into one transaction;
    a recorder whose pace would fill the pipe in a pause gets none: a pause before each
    batch capped the hand-off at a pipe per pause, and under an agent faster than that the
    proxy spooled and `run` exited seconds after its agent (bench/run_exit.py). Here a frame
    of half a pipe every 5 ms (a pause of 0.2 s would fill 20 pipes), then every 0.4 s (a
    pause before each)."""
    pauses: list[float] = []
    sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: (pauses.append(s), sleep(s)))
    read, write = os.pipe()
    pipe = fcntl.fcntl(read, fcntl.F_GETPIPE_SZ)
    frames = [frame(AddExchange("s", dataclasses.replace(
        captured(seq), raw_request=os.urandom(pipe // 2)))) for seq in range(count)]

    def send() -> None:
        for data in frames:
            os.write(write, data)
            threading.Event().wait(every)
        os.close(write)

    sending = threading.Thread(target=send)
    sending.start()
    batches = list(read_batches(read, gather=0.2))
    sending.join()
    os.close(read)
    assert [i.exchange.seq for batch in batches for i in batch] == list(range(len(frames)))
    assert fewest <= len(pauses) <= most, pauses


# --- a writer process that dies or stalls loses nothing (issue 19) -----------------------


def _stored(url: str, session_id: str = "s") -> list[int]:
    with open_store(url) as store:
        return sorted(store.seqs(session_id))


@pytest.mark.slow
def test_a_writer_killed_mid_session_is_replaced_and_loses_nothing(tmp_path, home):
    # Before: every exchange after the kill was dropped and the run still exited 0.
    url = default_store_url(tmp_path)
    writer = WriterProcess(url)
    writer.ready()
    writer.submit_session(Session(id="s"))
    for seq in range(20):
        writer.submit_exchange("s", captured(seq))
    first = writer._proc.pid
    os.kill(first, signal.SIGKILL)  # mid-session: some of the 20 are not written yet
    for seq in range(20, 50):
        writer.submit_exchange("s", captured(seq))
        time.sleep(0.01)
    writer.submit_end("s", 2.0, 0)
    writer.close()
    assert writer.restarts == 1 and writer._proc.pid != first
    assert (writer.dropped, writer.failed, writer.spool_left) == (0, 0, 0)
    completed = 50
    assert len(_stored(url)) == completed
    with open_store(url) as store:
        assert store.get_session("s").exit_code == 0
    assert list((home / "spool").glob("*.spool")) == []


@pytest.mark.slow
def test_a_stopped_writer_makes_the_proxy_spool_within_its_budget(tmp_path, home, caplog):
    # Before: the proxy held every frame (98 -> 245 MB), dropped them at exit after 120 s,
    # and the last frame was torn.
    url = default_store_url(tmp_path)
    budget = 4 << 20
    writer = WriterProcess(url, memory_budget=budget)
    writer.ready()
    big = [captured(seq) for seq in range(60)]
    for ex in big:
        ex.raw_response += b": " + b"x" * (256 << 10) + b"\n\n"  # an SSE comment: 256 KB
    os.kill(writer._proc.pid, signal.SIGSTOP)
    held = []
    try:
        writer.submit_session(Session(id="s"))
        for ex in big:
            writer.submit_exchange("s", ex)
            held.append(writer._held)
        writer.submit_end("s", 2.0, 0)
        assert max(held) <= budget + len(frame(AddExchange("s", big[0])))
        assert writer._spooler is not None  # the proxy spools what does not fit
        writer.close(timeout=3)  # the child never answers: what it did not take is spooled
    finally:
        try:
            os.kill(writer._proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert writer.dropped == 0 and writer.spool_left == 62
    assert "torn" not in caplog.text and "cut short" not in caplog.text
    # The next run with this store replays the spool.
    replay = Writer.open(url)
    replay.close()
    assert replay.replayed == 62
    completed = 60
    assert _stored(url) == list(range(completed))
    with open_store(url) as store:
        assert store.get_session("s").exit_code == 0
        [one] = [e for e in store.iter_exchanges("s", raw=True) if e.seq == 7]
        assert one.status == "complete" and SECRET.encode() not in one.raw_request


@pytest.mark.slow
def test_what_the_proxy_spooled_is_stored_by_the_end_of_a_healthy_run(tmp_path, home,
                                                                      monkeypatch):
    # The child replays the proxy's spool as it closes, so its input must end only once
    # that spool is closed. It ended as soon as the backlog was sent, and the spool was
    # left for the next run.
    url = default_store_url(tmp_path)
    writer = WriterProcess(url, memory_budget=4 << 20)
    writer.ready()
    close_spooler = WriterProcess._close_spooler

    def resume_then_close_spooler(self, spooler):
        os.kill(self._proc.pid, signal.SIGCONT)  # the backlog drains now
        try:  # time for the sender to end the input and the child to finish, if they would
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        close_spooler(self, spooler)

    monkeypatch.setattr(WriterProcess, "_close_spooler", resume_then_close_spooler)
    os.kill(writer._proc.pid, signal.SIGSTOP)  # behind: the proxy holds frames, then spools
    try:
        writer.submit_session(Session(id="s"))
        for seq in range(40):
            ex = captured(seq)
            ex.raw_response += b": " + b"x" * (256 << 10) + b"\n\n"
            writer.submit_exchange("s", ex)
        writer.submit_end("s", 2.0, 0)
        writer.close()
    finally:
        if writer._proc.poll() is None:
            os.kill(writer._proc.pid, signal.SIGCONT)
    assert writer.spooled > 0  # the proxy did spool some
    assert (writer.spool_left, writer.dropped, writer.failed) == (0, 0, 0)
    assert _stored(url) == list(range(40))
    assert list((home / "spool").glob("*.spool")) == []
