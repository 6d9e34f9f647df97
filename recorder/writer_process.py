"""The store writer in a process of its own, fed through a pipe.

`forge-record run` hands every finished exchange to this process instead of to a writer
thread beside the proxy. Folding a response, parsing a request, redacting, compressing and
the database all cost Python time; in the proxy's process that time is taken under the same
GIL as the event loop that streams the agent's calls, which then waits for it. Here it runs
on another core, and the proxy's part is to pickle the item into a non-blocking pipe.

It is also what keeps a finished exchange when the recorder is killed: the items already in
the pipe are read, written and committed by this process after its parent is gone (it sees
the end of its input and closes the writer, which writes everything it has).

The child is `python -m forge_record.writer_process STORE_URL [--no-redact-bodies] [-v]`:
- its stdin carries items, each a 4-byte big-endian length and a pickle of a store Item;
- on stdout it says `ready` once the store is open (or `error: MESSAGE` and exits 1), and
  after its input ends, one JSON line of the writer's counters;
- its stderr is the recorder's: its warnings reach the same terminal;
- it runs in a session of its own, so a Ctrl-C or a hangup on the agent's terminal does not
  reach it; it ends when its input does;
- it lowers its own priority (SCHED_BATCH, NICENESS): recording must not take CPU from the
  agent;
- it reads its input a batch at a time (GATHER) and writes each batch in one transaction.
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
from pathlib import Path
from typing import IO, Any

from forge_record.errors import ForgeRecordError, StoreError
from forge_record.records import Exchange, Session
from forge_record.store.items import AddExchange, AddSession, EndSession, Item

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
_COUNTERS = ("written", "failed", "dropped", "spooled", "overflowed", "replayed", "spool_left")


class WriterProcess:
    """A store Writer in a child process, with the Writer's interface: submit_*() never block
    and never raise; close() waits for everything to be written; the counters are read at
    close. Start it early and call `ready()` before recording: opening the store overlaps
    with starting the proxy.

    An item is pickled and written into the pipe by the thread that submits it (the proxy's
    event loop, for exchanges), without blocking: the pipe is made non-blocking and as large
    as the system allows. Only when it is full (the child is behind) do frames wait in memory
    for the sender thread, which writes them in order as the child reads. So an exchange is
    in the pipe when submit_exchange returns, and a thread is woken only when it must be."""

    def __init__(self, url: str, *, redact_bodies: bool = True, verbose: int = 0) -> None:
        argv = child_command(url, redact_bodies=redact_bodies, verbose=verbose)
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      start_new_session=True)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._answers = self._proc.stdout
        self._fd = self._proc.stdin.fileno()
        os.set_blocking(self._fd, False)
        _enlarge_pipe(self._fd)
        for name in _COUNTERS:
            setattr(self, name, 0)
        self.spool_file: Path | None = None
        self.sent = 0  # items in the pipe: from here on a dead recorder does not lose them
        self._lock = threading.Lock()  # submitters and the sender share the pipe and backlog
        self._backlog: deque[bytes] = deque()  # frames not yet in the pipe, one item each
        self._wake = threading.Event()
        self._closed = False
        self._broken = False
        self._sender = threading.Thread(target=self._send, name="forge-record-sender",
                                        daemon=True)
        self._sender.start()

    def ready(self) -> None:
        """Wait until the child has opened the store; StoreError with its message if it
        could not."""
        line = self._answers.readline().decode(errors="replace").strip()
        if line == "ready":
            return
        self._closed = self._broken = True  # nothing more is sent; close() only reaps it
        self._wake.set()
        self._proc.wait()
        if line.startswith("error: "):
            raise StoreError(line.removeprefix("error: "))
        raise StoreError(f"the store writer did not start (exit {self._proc.returncode})")

    # --- submitting (any thread, never blocks) ---------------------------------------------

    def submit_session(self, session: Session) -> None:
        self._submit(AddSession(session, os.getpid(), time.time()))

    def submit_exchange(self, session_id: str, exchange: Exchange) -> None:
        self._submit(AddExchange(session_id, exchange))

    def submit_end(self, session_id: str, ended_at: float, exit_code: int | None,
                   harness_version: str | None = None) -> None:
        self._submit(EndSession(session_id, ended_at, exit_code, harness_version))

    def _submit(self, item: Item) -> None:
        if self._closed:
            if not self._broken:  # a writer that never started has nothing to say
                self.dropped += 1
                log.warning("forge-record: writer is closed, dropped an item")
            return
        data = frame(item)
        with self._lock:
            if self._broken:
                self.dropped += 1
                return
            behind = bool(self._backlog)  # frames already waiting: the sender keeps the order
            self._backlog.append(data)
            if not behind:
                self._drain_backlog()
                if self._backlog:  # the pipe is full: the sender writes the rest
                    self._wake.set()

    def close(self, timeout: float = 60) -> None:
        """Send what is pending, end the child's input and wait for its counters."""
        if self._closed:
            self._sender.join(timeout)
            self._proc.wait()
            return
        self._closed = True
        self._wake.set()
        self._sender.join(timeout)
        try:
            out, _ = self._proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.error("forge-record: the store writer is still busy after %ss; it goes on "
                      "in the background (pid %d)", timeout, self._proc.pid)
            return
        self._read_counters(out)

    # --- the sender thread -----------------------------------------------------------------

    def _send(self) -> None:
        writable = select.poll()
        writable.register(self._fd, select.POLLOUT)
        while True:
            self._wake.wait()
            self._wake.clear()
            while self._backlog and not self._broken:
                writable.poll(1000)  # until the child has read some
                with self._lock:
                    self._drain_backlog()
            if self._closed:
                with self._lock:  # a submit from here on finds the input ended
                    self.dropped += len(self._backlog)
                    self._backlog.clear()
                    self._end_input()
                return

    def _drain_backlog(self) -> None:
        """Under _lock: write waiting frames, oldest first, as far as the pipe takes them."""
        while self._backlog:
            data = self._backlog[0]
            try:
                done = os.write(self._fd, data)
            except BlockingIOError:
                return
            except OSError as e:
                self._gone(e, len(self._backlog))
                self._backlog.clear()
                return
            if done < len(data):
                self._backlog[0] = data[done:]  # the rest of the same item
                return
            self._backlog.popleft()
            self.sent += 1

    def _gone(self, error: OSError, items: int) -> None:
        """The child died: nothing more can be stored this run."""
        self._broken = True
        self.dropped += items
        log.error("forge-record: the store writer is gone (%s); exchanges from now on "
                  "are not stored", error)

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

    def _read_counters(self, out: bytes) -> None:
        lines = out.decode(errors="replace").strip().splitlines()
        try:
            counters = json.loads(lines[-1]) if lines else {}
        except ValueError:
            counters = {}
        if not counters:
            log.error("forge-record: the store writer ended with exit %s without reporting; "
                      "see its messages above", self._proc.returncode)
            self.failed += 1
            return
        for name in _COUNTERS:
            setattr(self, name, getattr(self, name) + counters.get(name, 0))
        self.spool_file = Path(counters["spool_file"]) if counters.get("spool_file") else None


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


def child_command(url: str, *, redact_bodies: bool, verbose: int) -> list[str]:
    argv = [sys.executable, "-m", "forge_record.writer_process", url]
    argv += [] if redact_bodies else ["--no-redact-bodies"]
    return argv + ["-v"] * verbose


def frame(item: Item) -> bytes:
    data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(4, "big") + data


def read_batches(fd: int, gather: float = 0.0):
    """The items of a WriterProcess's pipe, a list at a time, up to its end: wait for the
    recorder's next bytes, let `gather` seconds pass, take everything the pipe holds. So the
    reader wakes once per batch rather than once per exchange, and the writer thread is
    handed the batch at once. A torn last item (the recorder died writing it) is dropped."""
    buffer = bytearray()
    readable = select.poll()
    readable.register(fd, select.POLLIN)
    ended = False
    while not ended:
        chunk = os.read(fd, _READ)  # blocks until the recorder writes, or ends
        ended = not chunk
        buffer += chunk
        if not ended and gather:
            time.sleep(gather)
        while not ended and readable.poll(0):
            chunk = os.read(fd, _READ)
            ended = not chunk
            buffer += chunk
        items, used = _unframe(buffer)
        del buffer[:used]
        if items:
            yield items
    if buffer:
        log.warning("forge-record: the last item from the recorder was cut short")


def _unframe(buffer: bytearray) -> tuple[list[Item], int]:
    """The whole frames at the start of `buffer`, and how many bytes they took."""
    items, at, view = [], 0, memoryview(buffer)
    while len(buffer) - at >= 4:
        size = int.from_bytes(view[at:at + 4], "big")
        if len(buffer) - at - 4 < size:
            break
        try:
            items.append(pickle.loads(view[at + 4:at + 4 + size]))
        except Exception:  # noqa: BLE001 - one bad frame must not cost the others
            log.exception("forge-record: an item from the recorder could not be read")
        at += 4 + size
    view.release()
    return items, at


# --- the child ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="forge_record.writer_process")
    ap.add_argument("url")
    ap.add_argument("--no-redact-bodies", action="store_true")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    args = ap.parse_args(argv)
    from forge_record.logs import setup_logging

    setup_logging(args.verbose)
    _step_back()
    out = sys.stdout
    try:
        writer = _open_writer(args.url, redact_bodies=not args.no_redact_bodies)
    except (ForgeRecordError, OSError) as e:
        _say(out, f"error: {e}")
        return 1
    _say(out, "ready")
    for items in read_batches(sys.stdin.fileno(), GATHER):
        for item in items:
            writer.submit(item)
    writer.close()
    counters: dict[str, Any] = {name: getattr(writer, name) for name in _COUNTERS}
    counters["spool_file"] = str(writer.spool_file) if writer.spool_file else None
    _say(out, json.dumps(counters))
    return 0


def _step_back() -> None:
    """Lower this process's priority (see NICENESS); before any thread starts, so that the
    writer thread has it too."""
    if hasattr(os, "SCHED_BATCH"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass  # not on this system: niceness alone
    if hasattr(os, "nice"):
        os.nice(NICENESS)


def _open_writer(url: str, *, redact_bodies: bool):
    from forge_record import config
    from forge_record.chain import ResponseChains
    from forge_record.finalize import finalize
    from forge_record.paths import home
    from forge_record.store import Writer

    redactor = config.redactor(home()) if redact_bodies else None
    prepare = functools.partial(finalize, redactor=redactor)
    chains = ResponseChains()  # rebuilds WebSocket calls' full context
    return Writer.open(url, prepare=lambda exchange: chains.stitch(prepare(exchange)))


def _say(out: IO[str], line: str) -> None:
    try:
        out.write(line + "\n")
        out.flush()
    except OSError:
        pass  # the recorder is gone; what it sent is written all the same


if __name__ == "__main__":
    sys.exit(main())
