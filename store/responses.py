"""Finding a stored Responses call by the id of its answer, for chains that cross writers.

A Codex call over WebSocket names the response before it (`previous_response_id`) and sends
only its new items (forge_record.chain). Behind `forge-record serve`, the call that made that
response may have gone through another replica, so this writer never saw it; its record is
in the store (it holds its own full context, stitched by the writer that stored it), or soon
will be: that replica's writer may still hold it in its batch or its backlog.

`StoredResponses(url, wait)` is the lookup the writer process gives ResponseChains: it looks
among the session's newest Responses exchanges (LOOK_BACK), newest first (the previous
response is almost always the latest), and asks again every POLL seconds for at most `wait`
seconds. It runs in the writer's thread, never in the proxy; the wait holds that writer's
queue (which spools past its budget, as always), only for a call whose previous response
this writer has not seen; before waiting it calls `before_wait` (its writer commits what
it has prepared, which the other writer may be waiting for). None when it never comes: the
chain then flags the call (never a wrong context). The store is opened on first use; a
store that does not answer is None.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from forge_record.errors import StoreError
from forge_record.records import Exchange
from forge_record.store import reader
from forge_record.store.schema import exchanges

log = logging.getLogger("forge_record")

POLL = 0.25
LOOK_BACK = 64
DIALECT = "openai.responses"


class StoredResponses:
    def __init__(self, url: str, wait: float) -> None:
        self.url = url
        self.wait = wait
        self._store: Any = None
        # called once before a lookup starts to wait: the writer writes what it has
        # prepared, which the writer this lookup waits for may itself be waiting for
        self.before_wait: Callable[[], None] | None = None

    def __call__(self, session_id: str, response_id: str) -> Exchange | None:
        deadline = time.monotonic() + self.wait
        asked = False
        while True:
            try:
                found = self._find(session_id, response_id)
            except StoreError as e:
                log.warning("forge-record: cannot look up response %s: %s", response_id, e)
                return None
            if found is not None or time.monotonic() >= deadline:
                return found
            if not asked and self.before_wait is not None:
                asked = True
                self.before_wait()
            time.sleep(POLL)

    def _find(self, session_id: str, response_id: str) -> Exchange | None:
        if self._store is None:
            from forge_record.store import open_store

            self._store = open_store(self.url)
        with self._store.reading("find a previous response") as conn:
            return find(conn, session_id, response_id)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def find(conn: sa.Connection, session_id: str, response_id: str) -> Exchange | None:
    """The session's stored Responses exchange whose answer is `response_id`, or None."""
    seqs = conn.scalars(sa.select(exchanges.c.seq)
                        .where(exchanges.c.session_id == session_id,
                               exchanges.c.dialect == DIALECT)
                        .order_by(exchanges.c.seq.desc()).limit(LOOK_BACK)).all()
    for seq in seqs:
        exchange = reader.read_one(conn, session_id, seq, raw=False)
        if exchange is not None and exchange.response is not None \
                and exchange.response.id == response_id:
            return exchange
    return None
