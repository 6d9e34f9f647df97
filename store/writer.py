"""Writer: one thread that owns the Store, so the proxy's event loop never waits on the
database or on compression.

Contract:
- submit_*() never block and never raise: they put the item on a bounded queue. If the queue
  is full (the database has stalled for a long while) the item is dropped, counted in
  `dropped`, and a warning names it. A later change spools such items to disk instead.
- Items are written in submission order, one transaction each (Store's own contract).
- `prepare`, if given, turns each submitted exchange into the one to store (e.g. parsing the
  request body), in the writer thread. If it raises, the error is logged and the exchange is
  stored as submitted: its raw bodies are the record of last resort.
- A write that fails is logged with its exception and counted in `failed`; the thread goes on
  with the next item. Losing one record must not stop the recording of the rest.
- close() writes everything already queued, stops the thread and closes the store.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from forge_record.records import Exchange, Session
from forge_record.store.store import Store

log = logging.getLogger("forge_record")

_STOP = object()


class Writer:
    def __init__(
        self,
        store: Store,
        maxsize: int = 10000,
        prepare: Callable[[Exchange], Exchange] | None = None,
    ) -> None:
        self.store = store
        self._prepare = prepare
        self.written = 0  # only the writer thread changes written and failed
        self.failed = 0
        self.dropped = 0
        self._lock = threading.Lock()  # submitters may be on several threads
        self._closed = False
        self._queue: queue.Queue[Any] = queue.Queue(maxsize)
        self._thread = threading.Thread(target=self._run, name="forge-record-writer", daemon=True)
        self._thread.start()

    def submit_session(self, session: Session) -> None:
        self._submit(f"session {session.id}", self.store.add_session, session)

    def submit_exchange(self, session_id: str, exchange: Exchange) -> None:
        what = f"exchange {exchange.seq} of session {session_id}"
        self._submit(what, self._add_exchange, session_id, exchange)

    def submit_end(
        self,
        session_id: str,
        ended_at: float,
        exit_code: int | None,
        harness_version: str | None = None,
    ) -> None:
        self._submit(f"end of session {session_id}", self._end, session_id, ended_at,
                     exit_code, harness_version)

    def close(self, timeout: float = 30) -> None:
        """Drain the queue (waiting at most `timeout` seconds in all), then close the store."""
        with self._lock:  # a submit either lands before _STOP or sees _closed
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + timeout
        try:
            self._queue.put(_STOP, timeout=timeout)
            self._thread.join(max(0.0, deadline - time.monotonic()))
        except queue.Full:
            pass
        if self._thread.is_alive():
            log.error("forge-record: %d writes still pending after %ss; they are lost",
                      self._queue.qsize(), timeout)
        self.store.close()

    def _add_exchange(self, session_id: str, exchange: Exchange) -> None:
        if self._prepare is not None:
            try:
                exchange = self._prepare(exchange)
            except Exception:
                log.exception("forge-record: could not prepare exchange %s of session %s; "
                              "storing it as captured", exchange.seq, session_id)
        self.store.add_exchange(session_id, exchange)

    def _end(self, session_id: str, ended_at: float, exit_code: int | None,
             harness_version: str | None) -> None:
        self.store.end_session(session_id, ended_at, exit_code, harness_version=harness_version)

    def _submit(self, what: str, write: Callable[..., None], *args: Any) -> None:
        with self._lock:
            try:
                if self._closed:
                    raise queue.Full
                self._queue.put_nowait((what, write, args))
                return
            except queue.Full:
                self.dropped += 1
        reason = "writer is closed" if self._closed else "write queue is full"
        log.warning("forge-record: %s, dropped %s", reason, what)

    def _run(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            what, write, args = item
            try:
                write(*args)
                self.written += 1
            except Exception:
                self.failed += 1
                log.exception("forge-record: could not write %s", what)
