"""Writer: one thread that owns the Store, so the proxy's event loop never waits on the
database, on compression or on the disk.

Contract:
- submit_*() never block and never raise: they put the item on a bounded in-memory queue
  (`maxsize` items, `max_bytes` of bodies). If the queue is full (the store has stalled for
  a long while), the item and every one after it go to the spool instead (store.spool), by a
  second thread, the spiller, so the caller never waits on the disk; counted in `overflowed`.
  Once the queue has emptied, the writer thread writes the spool into the store, and then
  takes from the queue again: items are written in submission order.
- The thread takes whatever is queued (up to BATCH items) and writes it in one transaction,
  in submission order. `prepare`, if given, turns each exchange into the one to store (e.g.
  parsing the request body), in the thread; it is called with the session's id and the
  exchange; if it raises, the error is logged and the
  exchange is stored as submitted: its raw bodies are the record of last resort. A prepare
  about to wait on the store for another writer calls write_in_hand() first, which commits
  the part of the batch prepared before it.
- A batch the store refuses for its content (a constraint, a missing session) is retried
  item by item; an item that still fails is logged with its exception and counted in
  `failed`, and the thread goes on: losing one record must not stop the recording of the rest.
- When the store does not answer (StoreUnavailable: Postgres down, SQLite locked for longer
  than its busy timeout), the batch and everything after it go to the spool (store.spool),
  fsync'd, counted in `spooled`. Every RETRY_EVERY seconds the thread asks the store again;
  once it answers, the spool is replayed (counted in `replayed`) and deleted, and writing goes
  on as before. The thread also replays, at start, spool files that earlier writers for the
  same store left behind (store.recovery).
- While idle it writes a heartbeat for its sessions every HEARTBEAT_EVERY seconds, which is
  how a session whose recorder died shows as interrupted (store.summary).
- Every store call has a deadline (store.deadline; the server's own statement and lock
  timeouts in store.engine): a store that hangs (a table lock held for minutes, a network
  path gone silent) counts as down, and what the call carried goes to the spool. The
  spool is the one place where an item waits whenever the store cannot take it now.
- close() writes everything already queued (to the store, or to the spool if it is still
  down), replays what other writers left in the spool meanwhile, stops the thread and
  closes the store. Items still spooled then are written by the next writer for this store;
  close() never drops one (if the thread is stuck past `timeout`, close spools the queue).
- `durable` counts the submitted items, in submission order, that are taken care of: all
  of the first `durable` are committed, spooled (fsync'd) or logged as failed. `on_durable`
  is called with it whenever it grows: the writer process acknowledges with it, so that the
  proxy forgets only what a dead writer process cannot lose.
- A SIGKILLed recorder loses only what was queued and not yet committed or spooled: with a
  store that keeps up, the exchange in flight. (`forge-record run` puts the writer in a
  process of its own, which a SIGKILLed recorder does not take down: recorder/
  writer_process.py.)
- Items spooled after an overflow were prepared by the spiller, one at a time, in order;
  only around the moment the store goes down while the queue is full can a spooled batch
  land after newer items in the spool.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_record.errors import StoreError
from forge_record.records import Exchange, Session
from forge_record.store import spool as spooling
from forge_record.store.deadline import Deadline, StoreTimedOut, default_deadline
from forge_record.store.engine import make_engine
from forge_record.store.items import AddExchange, AddSession, EndSession, Item, describe
from forge_record.store.recovery import replay_orphans
from forge_record.store.sink import Counted, Counters
from forge_record.store.store import Store, StoreUnavailable, fingerprint, open_store
from forge_record.store.summary import HEARTBEAT_EVERY

log = logging.getLogger("forge_record")

BATCH = 64
# A batch is prepared whole before it is written, and a prepared exchange (parsed, redacted,
# encoded) takes several times its captured size: batches stop at this many body bytes.
BATCH_BYTES = 4 << 20
RETRY_EVERY = 2.0
MAX_QUEUED_BYTES = 256 << 20  # bodies held in memory before the rest goes to the spool


def default_spool_dir() -> Path:
    from forge_record.paths import home

    return home() / "spool"


class Writer(Counted):
    def __init__(
        self,
        store: Store | None,
        maxsize: int = 10000,
        prepare: Callable[[str, Exchange], Exchange] | None = None,
        *,
        opener: Callable[[], Store] | None = None,
        store_fingerprint: str | None = None,
        spool_dir: Path | None = None,
        heartbeat_every: float = HEARTBEAT_EVERY,
        retry_every: float = RETRY_EVERY,
        max_bytes: int = MAX_QUEUED_BYTES,
        gather: float = 0.0,
        deadline: float | None = None,
        on_durable: Callable[[int], None] | None = None,
        spool_only: bool = False,
    ) -> None:
        """`store` may be None if it did not answer yet; then `opener` (called again every
        `retry_every` seconds) and `store_fingerprint` are needed. See Writer.open.
        `gather`: seconds to wait, once woken, for more items to write in the same
        transaction (a transaction of 16 small exchanges costs a third as much per exchange
        as 16 of one); for a writer that nothing waits on, as in writer_process.
        `deadline`: seconds a store call may take (default: store.deadline's).
        `spool_only`: never open the store, spool everything (see Writer.spool_only)."""
        if store is None and (opener is None and not spool_only or store_fingerprint is None):
            raise ValueError("a Writer without a store needs an opener and a fingerprint")
        self.store = store
        self._opener = opener
        self._prepare = prepare
        # Kept by the writer thread and the spiller, final after close() (store.sink).
        self.counters = Counters()
        self.batches = 0  # transactions the store was asked for, for tests and benchmarks
        self.durable = 0  # see the module's docstring
        self._on_durable = on_durable
        self._submitted = 0
        self._resolved: set[int] = set()  # items taken care of beyond the durable prefix
        self._durable_lock = threading.Lock()
        self._deadline = Deadline(default_deadline() if deadline is None else deadline)
        self._spool_only = spool_only
        self._spool = spooling.Spool(spool_dir or default_spool_dir(),
                                     store_fingerprint or store.fingerprint)
        self._spool_lock = threading.Lock()  # the writer thread and the spiller share these
        self._prepare_lock = threading.Lock()
        self._in_hand: list[tuple[int, Item]] = []  # prepared, not written (writer thread)
        self._down = store is None
        self._last_try = time.monotonic()
        self._heartbeat_every, self._retry_every = heartbeat_every, retry_every
        self._gather = gather
        self._live: set[str] = set()  # sessions this writer records, for the heartbeat
        self._lock = threading.Lock()  # submitters may be on several threads
        self._closed = False
        self._maxsize, self._max_bytes = maxsize, max_bytes
        self._queue: deque[tuple[int, Item]] = deque()  # (submission index, item)
        self._queued_bytes = 0
        self._wake = threading.Event()  # set when the queue has something for the thread
        self._overflow: deque[tuple[int, Item]] = deque()  # for the spiller, while overflowing
        self._overflowing = False
        self._spill_wake = threading.Event()
        self._spiller: threading.Thread | None = None
        self._thread = threading.Thread(target=self._run, name="forge-record-writer", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, url: str, prepare: Callable[[str, Exchange], Exchange] | None = None,
             **options: Any) -> Writer:
        """A Writer for the store at `url`. If the store does not answer now (a Postgres
        server that is down), recording starts anyway into the spool; any other problem
        (a bad URL, a schema that needs `db upgrade`) raises StoreError here."""
        opening = Deadline(options.get("deadline") or default_deadline())
        try:
            store = opening.call("open", open_store, url, recording=True)
        except StoreUnavailable as e:
            log.warning("forge-record: %s; recording to the spool until it answers", e)
            engine = make_engine(url)
            try:
                print_ = fingerprint(engine)
            finally:
                engine.dispose()
            return cls(None, prepare=prepare, opener=lambda: open_store(url, recording=True),
                       store_fingerprint=print_, **options)
        finally:
            opening.close()
        return cls(store, prepare=prepare, opener=lambda: open_store(url, recording=True),
                   **options)

    @classmethod
    def spool_only(cls, store_fingerprint: str,
                   prepare: Callable[[str, Exchange], Exchange] | None = None,
                   **options: Any) -> Writer:
        """A Writer that puts everything in a spool file for the store with this
        fingerprint, prepared, and never opens the store: the proxy's own spool, while the
        writer process is dead or behind (recorder/writer_process.py). The file is
        replayed by the next writer for the store once this one is closed."""
        return cls(None, prepare=prepare, store_fingerprint=store_fingerprint,
                   spool_only=True, **options)

    @property
    def fingerprint(self) -> str:
        """Names the store in spool files (store.store.fingerprint)."""
        return self._spool.fingerprint

    @property
    def spool_path(self) -> Path | None:
        """The spool file holding what is not written yet, if any."""
        return self._spool.path

    # --- submitting (any thread) ------------------------------------------------------

    def submit(self, item: Item) -> None:
        self._submit(item)

    def skip(self) -> None:
        """Count a submission that carried nothing (a frame that could not be read), so
        that `durable` still counts what the submitter sent."""
        with self._lock:
            index = self._submitted
            self._submitted += 1
        self._done([index])

    def submit_session(self, session: Session) -> None:
        self._submit(AddSession(session, os.getpid(), time.time()))

    def submit_exchange(self, session_id: str, exchange: Exchange) -> None:
        self._submit(AddExchange(session_id, exchange))

    def submit_end(self, session_id: str, ended_at: float, exit_code: int | None,
                   harness_version: str | None = None) -> None:
        self._submit(EndSession(session_id, ended_at, exit_code, harness_version))

    def close(self, timeout: float | None = None) -> None:
        """Write everything submitted, to the store or else to the spool, then close the
        store. `timeout` (default: three store deadlines) bounds the wait for the thread;
        past it, what is still queued is spooled from here."""
        with self._lock:  # a submit either lands before this or sees _closed
            if self._closed:
                return
            self._closed = True
        timeout = 3 * self._deadline.seconds + 10 if timeout is None else timeout
        deadline = time.monotonic() + timeout
        if self._spiller is not None:
            self._spill_wake.set()
            self._spiller.join(timeout)
        self._wake.set()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._spool_what_is_left(timeout)
        if self._spool.path is not None and not self._spool_only:
            log.warning("forge-record: the store did not take everything; %d items wait in %s "
                        "and are written by the next `forge-record run` with this store",
                        self._spool.count, self._spool.path)
        self.counters.spool_left, self.counters.spool_file = self._spool.count, self._spool.path
        self._spool.close()
        self._deadline.close()
        if self.store is not None and not self._thread.is_alive():
            self.store.close()

    def _spool_what_is_left(self, timeout: float) -> None:
        """The thread is stuck past close's timeout: spool the queue from here, so that
        nothing submitted is dropped (the thread's own batch is spooled by the thread)."""
        with self._lock:
            left = list(self._queue) + list(self._overflow)
            self._queue.clear()
            self._overflow.clear()
        # prepared before the spool is locked: the writer thread, in a prepare, may be
        # writing (write_in_hand), and so taking the spool lock, while holding the prepare lock
        prepared = [self._prepared(i) for _, i in left]
        if not self._spool_lock.acquire(timeout=self._deadline.seconds):
            self.counters.failed += len(left)
            log.error("forge-record: the store writer is stuck after %ss and the spool is "
                      "busy; %d items could not be kept", timeout, len(left))
            return
        try:
            self.counters.spooled += self._spill(prepared)
        finally:
            self._spool_lock.release()
        self._done([n for n, _ in left])
        log.error("forge-record: the store writer is still busy after %ss; %d queued items "
                  "were spooled", timeout, len(left))

    def _submit(self, item: Item) -> None:
        with self._lock:
            if not self._closed:
                entry = (self._submitted, item)
                self._submitted += 1
                size = _size(item)
                if not self._overflowing and (len(self._queue) < self._maxsize and
                                              self._queued_bytes + size <= self._max_bytes):
                    self._queue.append(entry)
                    self._queued_bytes += size
                    if not self._wake.is_set():
                        self._wake.set()
                    return
                self._overflow_to_spool(entry)
                return
            self.counters.dropped += 1
        log.warning("forge-record: writer is closed, dropped %s", describe(item))

    def _overflow_to_spool(self, entry: tuple[int, Item]) -> None:
        """Under _lock: the queue is full; this item and the ones after it go to the spool."""
        if not self._overflowing:
            self._overflowing = True
            log.warning("forge-record: the store is not keeping up; spooling %s and what "
                        "follows until it catches up", describe(entry[1]))
        self._overflow.append(entry)
        self._spill_wake.set()
        if self._spiller is None:
            self._spiller = threading.Thread(target=self._spill_overflow, daemon=True,
                                             name="forge-record-spiller")
            self._spiller.start()

    def _done(self, indexes: list[int]) -> None:
        """These submitted items are taken care of: advance `durable` over the ones that now
        form an unbroken prefix, and say so."""
        with self._durable_lock:
            self._resolved.update(indexes)
            before = self.durable
            while self.durable in self._resolved:
                self._resolved.discard(self.durable)
                self.durable += 1
            grown = self.durable if self.durable != before else None
        if grown is not None and self._on_durable is not None:
            try:
                self._on_durable(grown)
            except Exception:  # noqa: BLE001 - an acknowledgement must not stop the writing
                log.exception("forge-record: could not acknowledge written items")

    # --- the spiller thread ------------------------------------------------------------

    def _spill_overflow(self) -> None:
        while True:
            self._spill_wake.wait()
            self._spill_wake.clear()
            while True:
                with self._lock:  # a batch at a time: prepared items are several times
                    # the size of captured ones, and the overflow can be long
                    entries = _batch(self._overflow, BATCH)
                    closing = self._closed
                if not entries:
                    break
                prepared = [self._prepared(i) for _, i in entries]
                with self._spool_lock:
                    spilled = self._spill(prepared)
                with self._lock:  # they stay in _overflow until spooled: see _catch_up
                    for _ in entries:
                        if self._overflow:
                            self._overflow.popleft()
                self.counters.overflowed += spilled
                self._done([n for n, _ in entries])
                self._wake.set()  # the writer thread writes the spool once it is free
            if closing:
                return

    # --- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        if not self._down:
            self._replay_orphans()
        while True:
            if not self._wake.wait(self._retry_every if self._down else self._heartbeat_every):
                self._idle()
                continue
            self._wake.clear()
            if self._gather and len(self._queue) < BATCH and not self._closed:
                time.sleep(self._gather)
            while batch := self._take(BATCH):
                for n, item in batch:
                    prepared = self._prepared(item)  # which may write what is in hand
                    self._in_hand.append((n, prepared))
                self.write_in_hand()
            self._catch_up()
            with self._lock:
                if self._closed and not self._queue and not self._overflow:
                    break
        if self._down:
            self._recover(force=True)
        else:  # what others spooled meanwhile, e.g. the proxy while this writer was behind
            self._replay_orphans()

    def write_in_hand(self) -> None:
        """Write what the writer thread has prepared of its batch so far; nothing from any
        other thread. `prepare` calls it (through store.responses) before it waits for a
        record another writer may be holding: three `serve` replicas, each holding a
        prepared call of one Responses chain while waiting for the next call's previous
        response, would otherwise each wait out its deadline for the others."""
        if threading.current_thread() is not self._thread or not self._in_hand:
            return
        entries = list(self._in_hand)
        self._in_hand.clear()
        self._write([item for _, item in entries])
        self._done([n for n, _ in entries])

    def _take(self, n: int) -> list[tuple[int, Item]]:
        with self._lock:
            batch = _batch(self._queue, n)
            for _ in batch:
                self._queue.popleft()
            self._queued_bytes -= sum(_size(i) for _, i in batch)
        return batch

    def _catch_up(self) -> None:
        """The queue is empty: write what overflowed into the spool, then take from the queue
        again. Everything spooled is older than what is queued after the spiller is done."""
        if not self._overflowing or self._down:
            return
        try:
            with self._spool_lock:
                self.counters.replayed += self._spool.drain(self._replay_write)
        except StoreUnavailable as e:
            self._down, self._last_try = True, time.monotonic()
            log.warning("forge-record: %s; spooling until the store answers again", e)
            return
        with self._lock:
            if not self._overflow and self._spool.count == 0:
                self._overflowing = False
                log.warning("forge-record: the store caught up; %d items went through the "
                            "spool", self.counters.overflowed)

    def _prepared(self, item: Item) -> Item:
        with self._prepare_lock:  # the writer thread, or the spiller after an overflow
            return self._prepare_item(item)

    def _prepare_item(self, item: Item) -> Item:
        if isinstance(item, AddSession):
            self._live.add(item.session.id)
        elif isinstance(item, EndSession):
            self._live.discard(item.session_id)
        elif isinstance(item, AddExchange) and self._prepare is not None:
            try:
                return dataclasses.replace(
                    item, exchange=self._prepare(item.session_id, item.exchange))
            except Exception:
                log.exception("forge-record: could not prepare %s; storing it as captured",
                              describe(item))
        return item

    # --- store calls, each with its deadline -----------------------------------------------

    def _call(self, doing: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return self._deadline.call(doing, fn, *args, **kwargs)
        except StoreTimedOut:
            self.store = None  # its connection is the stuck one: recovery opens another
            raise

    def _store_write(self, items: list[Item], *, if_absent: bool = False) -> None:
        if self.store is None:
            raise StoreUnavailable("the store is not open")
        self._call(f"write {len(items)} items", self.store.write, items, if_absent=if_absent)

    def _write(self, items: list[Item]) -> None:
        if self._down and not self._recover():
            self._spool_down(items)
            return
        try:
            self.batches += 1
            self._store_write(items)
            self.counters.written += len(items)
        except StoreUnavailable as e:
            self._went_down(e, items)
        except StoreError:
            self._one_by_one(items)

    def _one_by_one(self, items: list[Item]) -> None:
        for n, item in enumerate(items):
            try:
                self._store_write([item])
                self.counters.written += 1
            except StoreUnavailable as e:
                self._went_down(e, items[n:])
                return
            except StoreError:
                self.counters.failed += 1
                log.exception("forge-record: could not write %s", describe(item))

    def _went_down(self, error: StoreError, items: list[Item]) -> None:
        log.warning("forge-record: %s; spooling until the store answers again", error)
        self._down, self._last_try = True, time.monotonic()
        self._spool_down(items)

    def _spool_down(self, items: list[Item]) -> None:
        with self._spool_lock:
            self.counters.spooled += self._spill(items)

    def _spill(self, items: list[Item]) -> int:
        """Append to the spool; how many went there (the others are lost and logged)."""
        try:
            self._spool.append(items)
        except OSError:
            self.counters.failed += len(items)
            log.exception("forge-record: cannot spool %d items; they are lost", len(items))
            return 0
        return len(items)

    def _recover(self, force: bool = False) -> bool:
        """Whether the store answers again, after replaying the spool into it."""
        if self._spool_only:
            return False
        if not force and time.monotonic() - self._last_try < self._retry_every:
            return False
        self._last_try = time.monotonic()
        try:
            if self.store is None:
                self.store = self._call("open", self._opener)
            self._call("reach", self.store.ping)
            with self._spool_lock:
                self.counters.replayed += self._spool.drain(self._replay_write)
        except StoreUnavailable:
            return False
        except StoreError:
            log.exception("forge-record: the store answers but refuses the spool; keeping "
                          "it in %s", self._spool.path)
            return False
        self._down = False
        log.warning("forge-record: the store answers again; spooled items written")
        self._replay_orphans()
        return True

    def _replay_write(self, items: list[Item]) -> None:
        """Write spooled items; one the store refuses for its content (say, an exchange whose
        session was never stored) is logged and counted, and must not block the rest."""
        try:
            self._store_write(items, if_absent=True)
            return
        except StoreUnavailable:
            raise
        except StoreError:
            pass
        for item in items:
            try:
                self._store_write([item], if_absent=True)
            except StoreUnavailable:
                raise
            except StoreError:
                self.counters.failed += 1
                log.exception("forge-record: could not write spooled %s", describe(item))

    def _replay_orphans(self) -> None:
        """Replay spool files that dead writers left for this store (store.recovery)."""
        def abandon(session_ids: set[str]) -> None:
            self._call("mark sessions interrupted", self.store.abandon, session_ids)

        try:
            self.counters.replayed += replay_orphans(
                self._spool.directory, self._spool.fingerprint, self._spool.path,
                self._replay_write, abandon)
        except StoreUnavailable as e:
            log.warning("forge-record: %s; the rest of the spool waits", e)
            self._down, self._last_try = True, time.monotonic()

    def _idle(self) -> None:
        if self._down:
            self._recover()
        elif self._live and self.store is not None:
            try:
                self._call("write heartbeat", self.store.heartbeat, sorted(self._live))
            except StoreError as e:
                log.info("forge-record: heartbeat not written: %s", e)
                if self.store is None:  # it timed out: the store counts as down
                    self._down, self._last_try = True, time.monotonic()


def _batch(entries: deque[tuple[int, Item]], n: int) -> list[tuple[int, Item]]:
    """The first entries, up to `n` of them and BATCH_BYTES of bodies (at least one)."""
    batch, size = [], 0
    for entry in itertools.islice(entries, n):
        size += _size(entry[1])
        if batch and size > BATCH_BYTES:
            break
        batch.append(entry)
    return batch


def _size(item: Item) -> int:
    if isinstance(item, AddExchange):
        return len(item.exchange.raw_request) + len(item.exchange.raw_response)
    return 0
