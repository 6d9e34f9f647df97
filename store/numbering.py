"""`serve`'s calls numbered as they start, in the writer process, before anything is written.

A replica of `forge-record serve` hands its writer process each call's start (StartCall) and,
when the call ends, its exchange under the call's name (AddExchange with `call`, unnumbered).
The writer's reading thread passes every item through a CallNumbers first:
- the starts it reads together take their session's next numbers in one short transaction of
  their own, at once: not after the writer's 0.1 s gather, nor behind the batch of exchanges
  its writing thread is busy with. So a call that ended before another began (a rollout's
  consecutive calls, spread over replicas) has the smaller number, as it had when the proxy
  itself reserved numbers; the proxy's process runs no store transaction per call;
- an exchange whose call has a number here leaves numbered with it; any other (a store that
  did not answer as its call started, a bridged call's extra engine record, a writer restarted
  mid-call) stays unnumbered and takes its session's next number as it is written
  (store.batch).
A call whose exchange never comes (the replica died) leaves its number as a gap: a missing
call (store.gateway.missing_calls).
The statement that takes a number also reads the session's status: a session found finished
(through any replica) or gone is reported (`on_closed(session_id, status)`; the writer
process says it to the proxy, which refuses the session's next calls from memory). So the
proxy never reads a session it knows again to learn that: its worker threads would take the
GIL from the event loop on every call of a rollout.
Starts are not spooled: when the store does not answer, its calls are numbered as they are
written, and their starts are not retried for `retry_every` seconds, so a store that hangs
holds the reading thread up once per period at most, for at most `deadline` seconds.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from forge_record.errors import SessionNotFound, StoreError
from forge_record.store.batch import note_named_by, take_seq
from forge_record.store.deadline import Deadline
from forge_record.store.gateway import FINISHED
from forge_record.store.items import AddExchange, Item, StartCall
from forge_record.store.store import Store, StoreUnavailable

log = logging.getLogger("forge_record")

DEADLINE = 5.0  # seconds a reservation may take before the store counts as down
RETRY_EVERY = 5.0
MAX_HELD = 100_000  # numbers kept for calls still running (the oldest forgotten first)
GONE = "gone"  # the status reported for a session the store no longer has


class CallNumbers:
    def __init__(self, opener: Callable[[], Store], *, deadline: float = DEADLINE,
                 retry_every: float = RETRY_EVERY,
                 on_closed: Callable[[str, str], None] | None = None) -> None:
        self._opener = opener
        self._on_closed = on_closed
        self._store: Store | None = None
        self._deadline = Deadline(deadline)
        self._retry_every = retry_every
        self._down_until = 0.0
        self._held: OrderedDict[str, int] = OrderedDict()  # call -> its number

    def pass_through(self, items: list[Item | None]) -> list[Item | None]:
        """The items to write, one for each given: a start is numbered now and becomes None
        (nothing left to write; the writer counts it as handled, store.Writer.skip), an
        exchange carries the number its call took as it started."""
        starts = [i for i in items if isinstance(i, StartCall)]
        if starts:
            self._reserve(starts)
        return [None if isinstance(i, StartCall) else
                self._numbered(i) if isinstance(i, AddExchange) else i for i in items]

    def _numbered(self, item: AddExchange) -> AddExchange:
        seq = self._held.pop(item.call, None) if item.call is not None else None
        if seq is None or item.numbered:
            return item
        return dataclasses.replace(item, numbered=True,
                                   exchange=dataclasses.replace(item.exchange, seq=seq))

    def _reserve(self, starts: list[StartCall]) -> None:
        if time.monotonic() < self._down_until:
            return
        try:
            numbers, closed = self._deadline.call("number calls", self._transaction, starts)
        except StoreUnavailable as e:
            self._went_down(e)
            return
        except StoreError:  # one refused (a session gone): not the rest
            numbers, closed = self._one_by_one(starts)
        self._held.update(numbers)
        if self._on_closed is not None:
            for session_id, status in closed.items():
                self._on_closed(session_id, status)
        while len(self._held) > MAX_HELD:
            self._held.popitem(last=False)

    def _one_by_one(self, starts: list[StartCall]) -> tuple[dict[str, int], dict[str, str]]:
        numbers: dict[str, int] = {}
        closed: dict[str, str] = {}
        for start in starts:
            try:
                one, shut = self._deadline.call("number a call", self._transaction, [start])
            except StoreUnavailable as e:
                self._went_down(e)
                break
            except SessionNotFound:
                closed[start.session_id] = GONE
            except StoreError as e:
                log.warning("forge-record: cannot number call %s of session %s: %s",
                            start.call, start.session_id, e)
            else:
                numbers.update(one)
                closed.update(shut)
        return numbers, closed

    def _went_down(self, error: StoreError) -> None:
        log.warning("forge-record: cannot number calls as they start (%s); numbering them as "
                    "they are written", error)
        self._store = None  # its connection may be the stuck one
        self._down_until = time.monotonic() + self._retry_every

    def _transaction(self, starts: list[StartCall]) -> tuple[dict[str, int], dict[str, str]]:
        """Each start's number, and the sessions found finished (session -> status)."""
        if self._store is None:
            self._store = self._opener()
        numbers: dict[str, int] = {}
        closed: dict[str, str] = {}
        with self._store.transaction("number calls") as conn:
            for start in starts:
                if start.named_by is not None:
                    note_named_by(conn, start.session_id, start.named_by)
                numbers[start.call], status = take_seq(conn, start.session_id)
                if status in FINISHED:
                    closed[start.session_id] = status
        return numbers, closed

    def close(self) -> None:
        self._deadline.close()
        if self._store is not None:
            self._store.close()
