"""The store writer in a process of its own, fed through a pipe, and what joins it to the addon.

`forge-record run` hands every finished exchange to this process instead of to a writer
thread beside the proxy. Folding a response, parsing a request, redacting, compressing and
the database all cost Python time; in the proxy's process that time is taken under the same
GIL as the event loop that streams the agent's calls, which then waits for it. Here it runs
on another core, and the proxy's part is to pickle the item into a non-blocking pipe.

It is also what keeps a finished exchange when the recorder is killed: the items already in
the pipe are read, written and committed by this process after its parent is gone (it sees
the end of its input and closes the writer, which writes everything it has).

The child is `python -m forge_record.writer_process STORE_URL [--no-redact-bodies]
[--chain-wait S] [--tally] [--number-calls] [-v]` (`--chain-wait`: look a previous Responses
answer up in the store, waiting at most S seconds for another writer to store it; `serve`
sets it, store.responses; `--tally`: fold each session's usage as it writes, lineage.tally;
`run` sets it; `--number-calls`: number `serve`'s calls as their starts are read,
store.numbering; `serve` sets it):
- its stdin carries items, each a 4-byte big-endian length and a pickle of a store Item;
- on stdout it says `ready FINGERPRINT` once the store is open (or `error: MESSAGE` and
  exits 1); then `ack N` each time the first N items it was sent are taken care of
  (committed, spooled or logged as failed: store.Writer's `durable`); with --number-calls,
  `closed SESSION STATUS` when numbering a call found its session finished or gone
  (store.numbering; WriterProcess.on_closed hears it); and after its input ends, one JSON
  line of the writer's counters (store.sink.Counters), with --tally also
  "usage": {session id: lineage.tally's figures};
- its stderr is the recorder's: its warnings reach the same terminal;
- it runs in a session of its own, so a Ctrl-C or a hangup on the agent's terminal does not
  reach it; it ends when its input does;
- it lowers its own priority (SCHED_BATCH, NICENESS): recording must not take CPU from the
  agent (not with --number-calls: then it numbers `serve`'s calls as they start, and its
  reading thread does not wait to gather, its writing thread does);
- it reads its input a batch at a time (GATHER, unless the recorder is ahead of it) and
  writes each batch in one transaction.

Nothing is lost when the child dies or stalls (docs/RELIABILITY.md). The proxy keeps every
frame it sent until the child acknowledges it, within MEMORY_BUDGET bytes:
- a child that dies (SIGKILL, the OOM killer) is noticed by its pipes; the frames it never
  acknowledged go to a spool file of the proxy's own, which is closed, and a new child is
  started (at most MAX_RESTARTS times; after that the proxy spools everything). The new
  child replays that file first (store.recovery), and the dead child's spool too;
- a child that is stopped or far behind stops acknowledging: past MEMORY_BUDGET new items
  go to the proxy's spool instead of memory. At close the child gets `timeout` seconds to
  finish; then what it has not acknowledged is spooled by the proxy and the child is killed.
  The child replays the proxy's spool when it closes, so at the end of a healthy run the
  store has everything and the spool is empty.
The proxy's spool is written by a thread (a store.Writer that only spools, which redacts
first), never by the event loop.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import json
import logging
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO

from forge_record.errors import ForgeRecordError, StoreError
from forge_record.lineage.tally import Tally
from forge_record.records import Exchange, Session
from forge_record.store import open_store
from forge_record.store.items import AddExchange, AddSession, EndSession, Item, StartCall
from forge_record.store.numbering import CallNumbers
from forge_record.store.sink import Counted, Counters, Sink

log = logging.getLogger("forge_record")

# Nothing waits on this process's writes, and a transaction of many small exchanges costs
# much less per exchange than one each: the reader gathers what comes within this time.
GATHER = 0.1
_READ = 1 << 20
# The writer's work can wait and the agent's cannot: on a busy machine the proxy, the agent
# and the tools it runs go first. The writer runs as batch work (SCHED_BATCH, which also
# drops a real-time policy inherited from the recorder) at niceness 10, which still gives
# it about a tenth of a core that everything else wants, far more than an agent's calls
# need; a writer that falls behind queues in memory and then spools (store.writer), it
# never slows the proxy.
NICENESS = 10
# Bytes of frames the proxy holds for the child (sent and not acknowledged, or not sent
# yet); past it, items go to the proxy's spool.
MEMORY_BUDGET = 64 << 20
# Bodies the child's writer queues in memory before its own spiller spools the rest: what
# bounds the child's memory when the store is slower than the agent (store.writer).
CHILD_QUEUE_BYTES = 32 << 20
# glibc raises its mmap threshold to the size of each large block freed, so the zstd
# contexts (several MB, mostly their 4 MiB window) of encoders `serve` makes and drops on
# nearly every call, once its open sessions outgrow the encoders' budget, were then carved
# from the heap and never given back: the writer's RSS reached 667 to 706 MB under 1,000
# rollouts with a 256 MB budget. Fixed at 1 MiB, they are mapped and unmapped as they come
# and go: 221 MB (bench/serve_sessions.py). Bodies stay on the heap: at glibc's initial 128
# KiB, mapping each request body cost `run`'s writer 30% more CPU a call at 184 KB contexts
# (bench/writer_session.py), at 1 MiB nothing measurable. Other C libraries ignore it.
# Fixing it also fixes glibc's trim threshold, at 128 KiB: the heap's top was given back
# whenever a request body (200 KB or more) was freed there and taken again, page by zeroed
# page, for the next one. At 4 MiB, `run`'s writer took half the page faults on a real
# 1,000-call Claude Code session (190,000 to 90,000) and half the system CPU (0.7 to 0.35
# ms a call, bench/run_exit.py --cli); more kept no fewer. It holds at most that much free
# at the top of each heap.
CHILD_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20), "MALLOC_TRIM_THRESHOLD_": str(4 << 20)}
MAX_RESTARTS = 3
CLOSE_TIMEOUT = 90.0


class WriterProcess(Counted):
    """A store Writer in a child process, with the Writer's interface (store.sink.Sink):
    submit_*() never block and never raise; close() waits (boundedly) until everything is
    in the store or the spool; the counters are final at close. Start it early and call
    `ready()` before recording: opening the store overlaps with starting the proxy.

    An item is pickled and written into the pipe by the thread that submits it (the proxy's
    event loop, for exchanges), without blocking: the pipe is made non-blocking and as large
    as the system allows. Only when it is full (the child is behind) do frames wait in memory
    for the sender thread, which writes them in order as the child reads. So an exchange is
    in the pipe when submit_exchange returns, and a thread is woken only when it must be."""

    def __init__(self, url: str, *, redact_bodies: bool = True, verbose: int = 0,
                 memory_budget: int = MEMORY_BUDGET, chain_wait: float | None = None,
                 tally: bool = False, number_calls: bool = False) -> None:
        """`tally`: the child folds each session's usage as it writes and hands it back at
        close (`usage`), for a recorder of one session (`run`); a gateway's sessions are
        many and long, and their folds would grow without end."""
        self._argv = child_command(url, redact_bodies=redact_bodies, verbose=verbose,
                                   chain_wait=chain_wait, tally=tally,
                                   number_calls=number_calls)
        self._redact_bodies = redact_bodies
        self._budget = memory_budget
        self.counters = Counters()
        self.sent = 0  # items wholly in a pipe: from here on a dead recorder does not lose them
        self.restarts = 0
        # per session, the usage the child folded as it wrote (lineage.tally), at close
        self.usage: dict[str, dict] = {}
        # called in the reader thread with (session id, status) when the child, numbering a
        # call, found its session finished or gone (serve: gateway.Gateway.closed)
        self.on_closed: Callable[[str, str], None] | None = None
        self._lock = threading.Lock()  # submitters, the sender and the reader share the state
        self._inflight: deque[bytes] = deque()  # frames (partly) in the pipe, not acknowledged
        self._written_of_last = 0  # bytes of _inflight[-1] in the pipe so far
        self._backlog: deque[bytes] = deque()  # frames not begun, one item each
        self.submitted = 0  # items submitted: an item's position is its number in this count
        self._unsettled: deque[int] = deque()  # positions of the items in memory, oldest first
        self._held = 0  # bytes of _inflight and _backlog
        self._over_budget = False
        self._spooler: Spooler | None = None  # the proxy's own spool, while it has one
        self._spooled_files: list[Path] = []
        self._fingerprint: str | None = None
        self._wake = threading.Event()
        self._closed = False  # no more submits
        self._ending = False  # the sender ends the child's input once its backlog is sent
        self._broken = False  # no child to send to: never started, dead, or input ended
        self._dead = False  # the child died under us: the sender replaces it
        self._start_child()
        self._sender = threading.Thread(target=self._send, name="forge-record-sender",
                                        daemon=True)
        self._sender.start()

    def _start_child(self) -> None:
        self._proc = subprocess.Popen(self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      start_new_session=True, env=CHILD_ENV | os.environ)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._answers = self._proc.stdout
        self._fd = self._proc.stdin.fileno()
        os.set_blocking(self._fd, False)
        _enlarge_pipe(self._fd)
        self._acked = 0
        self._child_counters: Counters | None = None
        self._reader: threading.Thread | None = None

    def ready(self) -> None:
        """Wait until the child has opened the store; StoreError with its message if it
        could not."""
        problem = self._await_ready()
        if problem is None:
            return
        self._closed = self._broken = self._ending = True  # close() only reaps it
        self._wake.set()
        raise StoreError(problem)

    def _await_ready(self) -> str | None:
        """Read the child's first line; then its acknowledgements are read by a thread.
        What went wrong, or None."""
        line = self._answers.readline().decode(errors="replace").strip()
        if line == "ready" or line.startswith("ready "):
            self._fingerprint = line.removeprefix("ready").strip() or self._fingerprint
            self._reader = threading.Thread(target=self._read_answers, args=(self._proc,),
                                            name="forge-record-acks", daemon=True)
            self._reader.start()
            return None
        self._proc.wait()
        if line.startswith("error: "):
            return line.removeprefix("error: ")
        return f"the store writer did not start (exit {self._proc.returncode})"

    # --- submitting (any thread, never blocks) ---------------------------------------------

    def submit_session(self, session: Session) -> None:
        self._submit(AddSession(session, os.getpid(), time.time()))

    def submit_exchange(self, session_id: str, exchange: Exchange, numbered: bool = True,
                        call: str | None = None) -> int:
        """`numbered` False: the store numbers it as it is written, with the number reserved
        for `call` if it has one (AddExchange). Returns the item's position (`settled`)."""
        return self._submit(AddExchange(session_id, exchange, numbered, call))

    def submit_start(self, session_id: str, call: str, named_by: str | None = None) -> int:
        """A `serve` call starts: the child reserves its number (StartCall)."""
        return self._submit(StartCall(session_id, call, named_by))

    def submit_end(self, session_id: str, ended_at: float, exit_code: int | None,
                   harness_version: str | None = None) -> None:
        self._submit(EndSession(session_id, ended_at, exit_code, harness_version))

    def settled(self, position: int) -> bool:
        """Whether the item submitted at `position`, and every one before it, is no longer
        in this process's memory alone: stored, spooled, or counted as failed."""
        with self._lock:
            return not self._unsettled or self._unsettled[0] > position

    def unsettled(self) -> int:
        """How many items are in memory only (sent and not acknowledged, or not sent)."""
        return len(self._unsettled)

    def _submit(self, item: Item) -> int:
        if self._closed:
            if not self._broken or self._dead:  # a writer that never started has nothing
                self.counters.dropped += 1
                log.warning("forge-record: writer is closed, dropped an item")
            return 0
        data = frame(item)
        with self._lock:
            self.submitted += 1
            if self._spools(len(data)):
                self._to_spool([item])
                return self.submitted
            behind = bool(self._backlog) or self._broken  # the sender keeps the order
            self._backlog.append(data)
            self._unsettled.append(self.submitted)
            self._held += len(data)
            if not behind:
                self._drain_backlog()
            if self._backlog or self._dead:
                self._wake.set()
            return self.submitted

    def _spools(self, size: int) -> bool:
        """Under _lock: whether this item goes to the proxy's spool rather than to memory."""
        if self.restarts > MAX_RESTARTS:
            return True
        if self._over_budget and self._held < self._budget // 2:
            self._over_budget = False
            log.warning("forge-record: the store writer caught up; sending to it again")
        elif not self._over_budget and self._held and self._held + size > self._budget:
            self._over_budget = True
            log.warning("forge-record: the store writer is %d MB behind; spooling from the "
                        "proxy until it catches up", self._held >> 20)
        return self._over_budget

    def _to_spool(self, items: list[Item]) -> None:
        """Under _lock: hand items to the proxy's spool (its thread prepares and writes)."""
        if self._spooler is None:
            self._spooler = Spooler(self._fingerprint or "unnamed", self._redact_bodies)
        for item in items:
            self._spooler.writer.submit(item)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Send what is pending, end the child's input and wait for its counters; past
        `timeout`, spool what the child has not acknowledged and stop it."""
        if self._closed:
            self._sender.join(timeout)
            self._proc.wait()
            return
        deadline = time.monotonic() + timeout
        if self._reader is None and not self._broken:  # ready() was never called
            problem = self._await_ready()
            if problem is not None:
                log.error("forge-record: %s", problem)
        with self._lock:
            self._closed = True
            spooler, self._spooler = self._spooler, None
        if spooler is not None:  # closed first: the child replays it as it closes
            self._close_spooler(spooler)
        self._ending = True
        self._wake.set()
        self._sender.join(max(0.0, deadline - time.monotonic()))
        if self._reader is not None:
            self._reader.join(max(0.0, deadline - time.monotonic()))
        if self._child_counters is None or self._sender.is_alive():
            self._abandon_child(timeout)
        else:
            self._proc.wait()
            self.counters.add(self._child_counters)
        self._count_spool_left()

    # --- the sender thread -----------------------------------------------------------------

    def _send(self) -> None:
        writable = select.poll()
        writable.register(self._fd, select.POLLOUT)
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._dead and not self._closed:
                self._replace_child()
                writable = select.poll()  # a new child: a new pipe
                writable.register(self._fd, select.POLLOUT)
            while self._backlog and not self._broken:
                writable.poll(1000)  # until the child has read some
                with self._lock:
                    self._drain_backlog()
            if self._ending:
                with self._lock:  # a submit from here on finds the input ended
                    self._end_input()
                return

    def _drain_backlog(self) -> None:
        """Under _lock: write waiting frames, oldest first, as far as the pipe takes them."""
        while self._backlog and not self._broken:
            data = self._backlog[0]
            try:
                done = os.write(self._fd, data)
            except BlockingIOError:
                return
            except OSError as e:
                self._gone(e)
                return
            if self._written_of_last == 0:  # the first bytes of this (whole) frame
                self._inflight.append(data)
            if done < len(data):
                self._backlog[0] = data[done:]  # the rest of the same item
                self._written_of_last += done
                return
            self._backlog.popleft()
            self._written_of_last = 0
            self.sent += 1

    def _gone(self, error: OSError | None) -> None:
        """Under _lock: the child died. The sender spools what it did not acknowledge and
        starts another."""
        if self._dead:
            return
        self._broken = self._dead = True
        log.error("forge-record: the store writer died (%s); keeping its exchanges",
                  error or f"exit {self._proc.poll()}")
        self._wake.set()

    def _replace_child(self) -> None:
        """In the sender: spool the dead child's unacknowledged frames and what waits, close
        that spool (the next child replays it), then start the next child."""
        with self._lock:
            frames = list(self._inflight) + self._unbegun()
            self._inflight.clear()
            self._backlog.clear()
            self._unsettled.clear()
            self._held, self._written_of_last = 0, 0
            self._to_spool(_unpickled(frames))
            spooler, self._spooler = self._spooler, None
            self.restarts += 1
        if spooler is not None:
            self._close_spooler(spooler)
        try:
            self._proc.stdin.close()
        except (OSError, AttributeError):
            pass
        self._proc.wait()
        if self.restarts > MAX_RESTARTS:
            log.error("forge-record: the store writer died %d times; spooling the rest of "
                      "the session", self.restarts)
            return
        self._start_child()
        problem = self._await_ready()
        if problem is not None:
            log.error("forge-record: the store writer could not be restarted: %s", problem)
            with self._lock:
                self.restarts = MAX_RESTARTS + 1
            return
        with self._lock:
            self._broken = self._dead = False
        log.warning("forge-record: the store writer was restarted")

    def _unbegun(self) -> list[bytes]:
        """Under _lock: backlog frames not begun (the head may be the rest of an inflight)."""
        frames = list(self._backlog)
        return frames[1:] if self._written_of_last and frames else frames

    def _end_input(self) -> None:
        """Under _lock: close the pipe. Nothing is written after this, not even a late
        submit racing close(): the descriptor's number may be another file's by then."""
        self._broken = True
        if self._proc.stdin is None:
            return
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        self._proc.stdin = None  # closed here: communicate() must not flush it

    # --- the reader thread: acknowledgements and the counters ------------------------------

    def _read_answers(self, proc: subprocess.Popen) -> None:
        for raw in proc.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith("ack "):
                self._acknowledge(proc, int(line.split()[1]))
            elif line.startswith("closed ") and len(parts := line.split()) == 3:
                self._closed_session(parts[1], parts[2])
            elif line.startswith("{"):
                try:
                    answer = json.loads(line)
                    self._child_counters = Counters.from_dict(answer)
                    self.usage.update(answer.get("usage") or {})
                except (ValueError, TypeError):
                    log.error("forge-record: the store writer's counters are unreadable")
        if self._child_counters is None and proc is self._proc:
            with self._lock:
                self._gone(None)

    def _closed_session(self, session_id: str, status: str) -> None:
        if self.on_closed is not None:
            try:
                self.on_closed(session_id, status)
            except Exception:  # noqa: BLE001 - the reader must go on reading acknowledgements
                log.exception("forge-record: cannot note that session %s is %s", session_id,
                              status)

    def _acknowledge(self, proc: subprocess.Popen, durable: int) -> None:
        with self._lock:
            if proc is not self._proc:
                return
            while self._acked < durable and self._inflight:
                if len(self._inflight) == 1 and self._written_of_last:
                    break  # still being written: the child cannot have it all
                self._held -= len(self._inflight.popleft())
                self._unsettled.popleft()
                self._acked += 1

    # --- when the child cannot finish ------------------------------------------------------

    def _abandon_child(self, timeout: float) -> None:
        """The child did not finish within close's timeout (stopped, stuck or dead): spool
        what it did not acknowledge, and stop it."""
        with self._lock:
            frames = list(self._inflight) + self._unbegun()
            self._inflight.clear()
            self._backlog.clear()
            self._unsettled.clear()
            self._held = 0
            if frames:
                self._to_spool(_unpickled(frames))
            spooler, self._spooler = self._spooler, None
        if self._proc.poll() is None:
            log.error("forge-record: the store writer did not finish within %ss; %d items it "
                      "had not written are spooled", timeout, len(frames))
            self._proc.kill()
        self._proc.wait()
        if spooler is not None:
            self._close_spooler(spooler)

    def _close_spooler(self, spooler: Spooler) -> None:
        spooler.writer.close()
        self.counters.spooled += spooler.writer.spooled
        self.counters.failed += spooler.writer.failed
        if spooler.writer.spool_file is not None:
            self._spooled_files.append(spooler.writer.spool_file)

    def _count_spool_left(self) -> None:
        """What waits in the proxy's spool files: those a child did not replay."""
        for path in self._spooled_files:
            if path.exists():
                with open(path, "rb") as f:
                    self.counters.spool_left += sum(1 for _ in _read_spool(f))
                self.counters.spool_file = path


class Spooler:
    """The proxy's own spool: a store.Writer that never opens the store, so everything it is
    given goes to a spool file, prepared (folded, redacted) by its thread as the child would."""

    def __init__(self, fingerprint: str, redact_bodies: bool) -> None:
        from forge_record.store import Writer

        self.writer = Writer.spool_only(fingerprint, prepare=_preparer(redact_bodies))


def _read_spool(f):
    from forge_record.store.spool import read

    return read(f)


def _unpickled(frames: list[bytes]) -> list[Item]:
    items, _ = _unframe(bytearray(b"".join(frames)))
    return [i for i in items if i is not None]


class SessionSink:
    """What the addon calls with each finished exchange: it goes to the writer under the
    session's id, and the harness's version is taken from the first User-Agent naming it."""

    def __init__(self, writer: Sink, session_id: str,
                 version_from: Callable[[str], str | None],
                 observe: Callable[[Exchange], None] | None = None) -> None:
        """`observe`, if given, sees each exchange first (run counts failed calls)."""
        self.writer = writer
        self.session_id = session_id
        self.sniffer = VersionSniffer(version_from)
        self.observe = observe
        self.captured = 0  # exchanges handed on: none at the end means nothing was recorded

    def __call__(self, exchange: Exchange) -> None:
        self.captured += 1
        self.sniffer(exchange)
        if self.observe is not None:
            self.observe(exchange)
        self.writer.submit_exchange(self.session_id, exchange)

    @property
    def version(self) -> str | None:
        return self.sniffer.version


class VersionSniffer:
    """Takes the harness version from the first User-Agent that names it."""

    def __init__(self, version_from: Callable[[str], str | None]) -> None:
        self._version_from = version_from
        self.version: str | None = None

    def __call__(self, exchange: Exchange) -> None:
        if self.version is None:
            self.version = self._version_from(exchange.request_headers.get("user-agent", ""))


def _enlarge_pipe(fd: int) -> None:
    """Make the pipe as large as an unprivileged process may (Linux: 1 MiB by default), so
    that a burst of exchanges fits while the child is busy with the one before."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if set_size is None:
        return
    try:
        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        fcntl.fcntl(fd, set_size, limit)
    except (OSError, ValueError):
        pass  # the default size works too, with the sender thread stepping in sooner


def child_command(url: str, *, redact_bodies: bool, verbose: int,
                  chain_wait: float | None = None, tally: bool = False,
                  number_calls: bool = False) -> list[str]:
    argv = [sys.executable, "-m", "forge_record.writer_process", url]
    argv += [] if redact_bodies else ["--no-redact-bodies"]
    argv += ["--tally"] if tally else []
    argv += [] if chain_wait is None else ["--chain-wait", str(chain_wait)]
    argv += ["--number-calls"] if number_calls else []
    return argv + ["-v"] * verbose


def frame(item: Item) -> bytes:
    data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(4, "big") + data


def read_batches(fd: int, gather: float = 0.0):
    """The items of a WriterProcess's pipe, a list at a time, up to its end: wait for the
    recorder's next bytes, let `gather` seconds pass, take everything the pipe holds. So the
    reader wakes once per batch rather than once per exchange, and the writer thread is
    handed the batch at once. It does not pause when the recorder, at the pace the last
    batch measured, would fill the pipe during the pause: the pipe holds 1 MiB, so a pause
    before every batch capped the hand-off at ~10-20 MB/s, under what an agent making 60
    calls of 200 KB a second sends (the proxy spooled, and `run` exited seconds after its
    agent, bench/run_exit.py).
    A torn last item (the recorder died writing it) is dropped.
    A frame that cannot be unpickled is None in its batch (it still counts as an item)."""
    buffer = bytearray()
    readable = select.poll()
    readable.register(fd, select.POLLIN)
    whole_pipe = _pipe_size(fd)
    ended = fast = False
    since = time.monotonic()
    while not ended:
        chunk = os.read(fd, _READ)  # blocks until the recorder writes, or ends
        ended = not chunk
        got = len(chunk)
        buffer += chunk
        if not ended and gather and not fast:
            time.sleep(gather)
        while not ended and readable.poll(0):
            chunk = os.read(fd, _READ)
            ended = not chunk
            got += len(chunk)
            buffer += chunk
        now = time.monotonic()
        fast = got * gather >= whole_pipe * (now - since)  # would fill the pipe in a pause
        since = now
        items, used = _unframe(buffer)
        del buffer[:used]
        if items:
            yield items
    if buffer:
        log.warning("forge-record: the last item from the recorder was cut short")


def _pipe_size(fd: int) -> int:
    """How many bytes the pipe holds (Linux); _READ where that cannot be asked."""
    get_size = getattr(fcntl, "F_GETPIPE_SZ", None)
    try:
        return fcntl.fcntl(fd, get_size) if get_size is not None else _READ
    except OSError:
        return _READ


def _unframe(buffer: bytearray) -> tuple[list[Item | None], int]:
    """The whole frames at the start of `buffer`, and how many bytes they took."""
    items: list[Item | None] = []
    at, view = 0, memoryview(buffer)
    while len(buffer) - at >= 4:
        size = int.from_bytes(view[at:at + 4], "big")
        if len(buffer) - at - 4 < size:
            break
        try:
            items.append(pickle.loads(view[at + 4:at + 4 + size]))
        except Exception:  # noqa: BLE001 - one bad frame must not cost the others
            log.exception("forge-record: an item from the recorder could not be read")
            items.append(None)
        at += 4 + size
    view.release()
    return items, at


# --- the child ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="forge_record.writer_process")
    ap.add_argument("url")
    ap.add_argument("--no-redact-bodies", action="store_true")
    ap.add_argument("--chain-wait", type=float)
    ap.add_argument("--tally", action="store_true")
    ap.add_argument("--number-calls", action="store_true")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    args = ap.parse_args(argv)
    from forge_record.logs import setup_logging

    setup_logging(args.verbose)
    # With --number-calls this process numbers `serve`'s calls as they start and must keep
    # up with them: it keeps niceness 0, since a niced thread holding the GIL while others run
    # would hold up the numbering thread behind it. It is still batch work, so it never
    # preempts the proxy when an item wakes it (bench/serve_sessions.py: before, the proxy's
    # event loop lost its core to the writer on most of the two hand-offs each call makes).
    _step_back(0 if args.number_calls else NICENESS)
    out = sys.stdout
    say = functools.partial(_say, out, threading.Lock())
    tally = Tally() if args.tally else None  # each session's usage (run's closing line)
    try:
        writer = _open_writer(args.url, redact_bodies=not args.no_redact_bodies,
                              on_durable=lambda n: say(f"ack {n}"), chain_wait=args.chain_wait,
                              tally=tally, number_calls=args.number_calls)
    except (ForgeRecordError, OSError) as e:
        say(f"error: {e}")
        return 1
    say(f"ready {writer.fingerprint}")
    numbers = CallNumbers(functools.partial(open_store, args.url, recording=True),
                          on_closed=lambda sid, status: say(f"closed {sid} {status}")) \
        if args.number_calls else None
    for items in read_batches(sys.stdin.fileno(), 0.0 if numbers else GATHER):
        for item in numbers.pass_through(items) if numbers else items:
            if item is None:
                writer.skip()
            else:
                writer.submit(item)
    writer.close()
    if numbers is not None:
        numbers.close()
    usage = {} if tally is None else {"usage": tally.figures()}
    say(json.dumps({**writer.counters.to_dict(), **usage}))
    return 0


def _step_back(niceness: int) -> None:
    """Make this process batch work at `niceness` (see NICENESS); before any thread starts,
    so that every thread has it. SCHED_BATCH is what keeps a waking writer from preempting
    the proxy; the niceness is how much CPU it gives up to others on a busy machine."""
    if hasattr(os, "SCHED_BATCH"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass  # not on this system: niceness alone
    if niceness and hasattr(os, "nice"):
        os.nice(niceness)


def _preparer(redact_bodies: bool,
              lookup: Callable[[str, str], Exchange | None] | None = None,
              ) -> Callable[[str, Exchange], Exchange]:
    """What turns a captured exchange into the one to store: finalize (fold, parse, redact),
    then stitch a WebSocket call's full context (`lookup`: previous responses another
    writer stored, store.responses) and join a bridged call's two records."""
    from forge_record import config
    from forge_record.bridge.pairs import Pairs
    from forge_record.chain import ResponseChains
    from forge_record.finalize import finalize
    from forge_record.outcome import log_exchange
    from forge_record.paths import home

    redactor = config.redactor(home()) if redact_bodies else None
    prepare = functools.partial(finalize, redactor=redactor)
    chains = ResponseChains(lookup)  # rebuilds WebSocket calls' full context
    pairs = Pairs()  # the engine's tokens onto a bridged call's agent record
    # -v: one line per exchange, once it is folded (forge_record.outcome)
    return lambda sid, exchange: log_exchange(pairs.join(chains.stitch(prepare(exchange), sid)))


def _open_writer(url: str, *, redact_bodies: bool, on_durable: Callable[[int], None],
                 chain_wait: float | None = None, tally: Tally | None = None,
                 number_calls: bool = False):
    from forge_record.store import Writer
    from forge_record.store.responses import StoredResponses

    lookup = None if chain_wait is None else StoredResponses(url, chain_wait)
    prepare = _preparer(redact_bodies, lookup)
    if tally is not None:
        prepare = _tallied(prepare, tally)
    # With number_calls, the reading thread hands starts on at once and the writing thread
    # gathers exchanges in its place. Neither steps back: a niced thread holding the GIL
    # while the busy machine runs others would hold up the numbering thread behind it (a
    # priority inversion that let consecutive calls over replicas swap numbers under load).
    # Without, this thread gathers (read_batches) and steps back (main).
    writer = Writer.open(url, prepare=prepare, on_durable=on_durable,
                         max_bytes=CHILD_QUEUE_BYTES, gather=GATHER if number_calls else 0.0)
    if lookup is not None:
        lookup.before_wait = writer.write_in_hand
    return writer


def _tallied(prepare: Callable[[str, Exchange], Exchange], tally: Tally
             ) -> Callable[[str, Exchange], Exchange]:
    """`prepare`, which also folds each record it makes into the session's usage: the fold
    that `run`'s closing line would otherwise do by reading the whole session back."""
    def prepared(sid: str, exchange: Exchange) -> Exchange:
        record = prepare(sid, exchange)
        tally.add(sid, record)
        return record

    return prepared


def _say(out: IO[str], lock: threading.Lock, line: str) -> None:
    try:
        with lock:  # the writer thread acknowledges while the main thread may speak
            out.write(line + "\n")
            out.flush()
    except OSError:
        pass  # the recorder is gone; what it sent is written all the same


def _exit(code: int) -> None:
    """End at once: everything is committed and the counters said, and the recorder waits
    for this process's end. An interpreter's ordinary teardown (every module's objects,
    SQLAlchemy's among them) at this process's low priority took 0.4 to 1.2 s on a busy
    machine, all of it added to `run`'s exit (bench/run_exit.py)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
