"""Sessions a replica has resolved lately, by token hash: what spares a call the store lookup.

Every proxied call names its session by token; reading that session from the store before
forwarding cost a round trip on every call (and a hop to a worker thread). A session read
less than TTL seconds ago is served from here, on the event loop, with no store at all.

What may be stale, and for how long:
- a session finished (or discarded) through another replica keeps being served by this one
  for at most TTL seconds after the finish committed; one finished through this replica is
  dropped at once (`forget`);
- nothing else about a session changes while it is open (its id and token never do), so a
  stale row can only be one that is still open here and finished elsewhere.
While the store does not answer, rows of any age are used (`any_age`): a session seen open
goes on through an outage (docs/ROLLOUTS.md, "A store outage").
At most SIZE sessions are kept, the least recently read go first; the event loop reads and
worker threads write, each a single dict operation (atomic under the GIL).
"""

from __future__ import annotations

import time
from typing import Any

TTL = 2.0  # seconds: the bound on serving a session finished through another replica
SIZE = 100_000


class KnownSessions:
    def __init__(self, ttl: float = TTL, size: int = SIZE) -> None:
        self.ttl = ttl
        self.size = size
        self._rows: dict[str, tuple[float, dict[str, Any]]] = {}  # token hash -> (read at, row)
        self._digests: dict[str, str] = {}  # session id -> token hash

    def __len__(self) -> int:
        return len(self._rows)

    def fresh(self, digest: str) -> dict[str, Any] | None:
        """The session row read less than `ttl` seconds ago, if any."""
        entry = self._rows.get(digest)
        if entry is None or time.monotonic() - entry[0] >= self.ttl:
            return None
        return entry[1]

    def any_age(self, digest: str) -> dict[str, Any] | None:
        entry = self._rows.get(digest)
        return None if entry is None else entry[1]

    def remember(self, digest: str, row: dict[str, Any]) -> None:
        self._rows.pop(digest, None)  # re-inserted last: the oldest read stays first
        self._rows[digest] = (time.monotonic(), row)
        self._digests[row["session_id"]] = digest
        while len(self._rows) > self.size:
            _, (_, old) = _oldest(self._rows)
            self._digests.pop(old["session_id"], None)

    def forget(self, session_id: str) -> None:
        digest = self._digests.pop(session_id, None)
        if digest is not None:
            self._rows.pop(digest, None)


def _oldest(rows: dict[str, tuple[float, dict[str, Any]]]) -> tuple[str, tuple[float, Any]]:
    digest = next(iter(rows))
    return digest, rows.pop(digest)
