"""Sessions a replica has resolved lately, by token hash: what spares a call the store lookup.

Every proxied call names its session by token; reading that session from the store before
forwarding cost a round trip on every call (and a hop to a worker thread, ~10 ms on a busy
replica). A session this replica read or created in the last STALE seconds is served from
here, on the event loop, with no store before forwarding; an older one, or none, is read
before the call is forwarded.

What may be stale: nothing about a session changes while it is open (its id and token never
do), so only a session finished (or discarded) through another replica, or deleted. Each call
that starts takes its number in the writer process, in a statement that also reads the
session's status (store.numbering); a session found finished or gone there is marked here
(`closed`), so this replica refuses it from the call after the first one that started after
the finish committed (and the calls that started while that number was taken, a few ms).
One finished through this replica is dropped at once (`forget`).
While the store does not answer, rows of any age are used (`any_age`): a session seen open
goes on through an outage (docs/ROLLOUTS.md, "A store outage").
At most SIZE sessions are kept, the least recently read go first; the event loop reads, and
worker threads and the writer's reader thread write, each a single dict operation (atomic
under the GIL).
"""

from __future__ import annotations

import time
from typing import Any

STALE = 600.0  # seconds a row is used without reading it again
SIZE = 100_000


class KnownSessions:
    def __init__(self, stale: float = STALE, size: int = SIZE) -> None:
        self.stale = stale
        self.size = size
        self._rows: dict[str, tuple[float, dict[str, Any]]] = {}  # token hash -> (read at, row)
        self._digests: dict[str, str] = {}  # session id -> token hash

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, digest: str) -> dict[str, Any] | None:
        """The session row, if it was read less than `stale` ago."""
        entry = self._rows.get(digest)
        if entry is None or time.monotonic() - entry[0] >= self.stale:
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

    def note(self, digest: str, how: str) -> None:
        """The row says how the session's calls name it from now on (its age stays)."""
        entry = self._rows.get(digest)
        if entry is not None:
            self._rows[digest] = (entry[0], {**entry[1], "keyed_by": how})

    def closed(self, session_id: str, status: str) -> None:
        """The store says the session finished with `status` (its age stays)."""
        digest = self._digests.get(session_id)
        entry = None if digest is None else self._rows.get(digest)
        if entry is not None:
            self._rows[digest] = (entry[0], {**entry[1], "status": status})

    def forget(self, session_id: str) -> None:
        digest = self._digests.pop(session_id, None)
        if digest is not None:
            self._rows.pop(digest, None)


def _oldest(rows: dict[str, tuple[float, dict[str, Any]]]) -> tuple[str, tuple[float, Any]]:
    digest = next(iter(rows))
    return digest, rows.pop(digest)
