"""Store calls with a deadline, for the store writer.

A database that accepts a connection and then never answers (a network path that drops
packets, a relay that went silent) blocks a driver call for as long as TCP lets it: hours.
Postgres' own timeouts (store.engine) end what the server is running; they cannot end a call
whose answer never arrives. So the writer makes its store calls through a Deadline: the call
runs on a worker thread, and if it has not returned within `seconds` the caller gets
StoreTimedOut (a StoreUnavailable: the writer spools the items and tries again later).

The worker of a call that timed out is left to end on its own: a daemon thread, it never
keeps the process alive, and it is never given another call. Its connection is the stuck
one, so the caller must not use that Store again (it opens a new one). If the stuck call
commits after all, the spooled copy is replayed `if_absent`: each item is stored once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from forge_record.store.engine import STATEMENT_TIMEOUT
from forge_record.store.store import StoreUnavailable

T = TypeVar("T")

# The server ends a statement at STATEMENT_TIMEOUT; past this the answer is not coming.
DEADLINE = STATEMENT_TIMEOUT + 5.0
DEADLINE_ENV = "FORGE_RECORD_STORE_DEADLINE"


class StoreTimedOut(StoreUnavailable):
    """A store call did not return within its deadline."""


def default_deadline() -> float:
    """DEADLINE, or the seconds FORGE_RECORD_STORE_DEADLINE gives (an operator's knob for a
    store that is slow on purpose, and for tests)."""
    try:
        return float(os.environ[DEADLINE_ENV])
    except (KeyError, ValueError):
        return DEADLINE


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._worker: _Worker | None = None

    def call(self, doing: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs), or StoreTimedOut after `seconds` (`doing` names it)."""
        if self._worker is None:
            self._worker = _Worker()
        job = _Job(fn, args, kwargs)
        self._worker.jobs.append(job)
        self._worker.wake.set()
        if not job.done.wait(self.seconds):
            self._worker.abandoned = True  # stuck in `fn`: it gets no other call
            self._worker = None
            raise StoreTimedOut(f"the store did not answer within {self.seconds:g}s ({doing})")
        if job.error is not None:
            raise job.error
        return job.result


    def close(self) -> None:
        """End the idle worker (a worker stuck in a call ends when the call does)."""
        if self._worker is not None:
            self._worker.abandoned = True
            self._worker.wake.set()
            self._worker = None


class _Job:
    def __init__(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn(*self.args, **self.kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the caller, who raises it
            self.error = e
        self.done.set()


class _Worker:
    """One daemon thread that runs the jobs of one caller, one at a time."""

    def __init__(self) -> None:
        self.jobs: list[_Job] = []
        self.wake = threading.Event()
        self.abandoned = False
        threading.Thread(target=self._run, name="forge-record-store-call", daemon=True).start()

    def _run(self) -> None:
        while not self.abandoned:
            self.wake.wait()
            self.wake.clear()
            while self.jobs and not self.abandoned:
                self.jobs.pop(0).run()
