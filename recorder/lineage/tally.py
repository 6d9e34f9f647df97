"""A session's usage folded as its exchanges are written, so `run`'s closing line need not
read the session back.

`Tally` is fed each exchange the store writer prepares (the record it stores) and keeps one
lineage fold per session: `analyze` is already a fold in seq order, so feeding it the same
exchanges gives the same counts (`usage`, the one definition) as reading them back. What the
fold cannot see in order it gives up on: an exchange without a seq (the store numbers it), or
one older than an exchange already fed once the small reorder window is past. A session given
up on has no figures; its reader counts from the store instead. `figures()` carries how many
exchanges were folded, so the reader can check that they are all the store holds.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import Any

from forge_record.lineage.signals import RecentMemo
from forge_record.lineage.threads import _Fold
from forge_record.records import Exchange

# Exchanges that finish out of seq order (parallel subagents) are held this many deep
# before the oldest is folded.
WINDOW = 16
# Hashes of records (messages, tools, system blocks) a session's fold remembers: a few calls'
# worth, so that the writer's memory does not grow with the session (signals.RecentMemo).
MEMO = 1024


class _SessionFold:
    def __init__(self) -> None:
        self.fold = _Fold(None, fingerprints=False, memo=RecentMemo(MEMO))
        self.held: list[tuple[int, int, Exchange]] = []  # a heap by seq
        self.last = -1  # the newest seq folded
        self.folded = 0
        self.flags: dict[str, int] = {}
        self.broken = False

    def add(self, ex: Exchange, order: int) -> None:
        if ex.seq is None or ex.seq <= self.last:
            self.broken = True
            self.held.clear()
            return
        heapq.heappush(self.held, (ex.seq, order, ex))
        while len(self.held) > WINDOW:
            self._feed(heapq.heappop(self.held)[2])

    def finish(self) -> dict[str, Any] | None:
        while self.held and not self.broken:
            self._feed(heapq.heappop(self.held)[2])
        if self.broken:
            return None
        return {"usage": self.fold.finish().usage, "exchanges": self.folded,
                "flags": dict(self.flags)}

    def _feed(self, ex: Exchange) -> None:
        self.fold.feed(ex)
        self.last = ex.seq
        self.folded += 1
        for flag in ex.flags or ():
            self.flags[flag] = self.flags.get(flag, 0) + 1


class Tally:
    """Per-session usage, fed from any thread (the writer's, or its spiller's)."""

    def __init__(self) -> None:
        self._sessions: dict[str, _SessionFold] = {}
        self._lock = threading.Lock()
        self._order = itertools.count()

    def add(self, session_id: str, ex: Exchange) -> None:
        with self._lock:
            fold = self._sessions.setdefault(session_id, _SessionFold())
            if not fold.broken:
                try:
                    fold.add(ex, next(self._order))
                except Exception:  # noqa: BLE001 - a figure it cannot make is read back
                    fold.broken = True

    def figures(self) -> dict[str, dict[str, Any]]:
        """{session id: {"usage", "exchanges" (how many were folded), "flags" (count per
        exchange flag)}}, for the sessions every exchange of which could be folded."""
        with self._lock:
            out = {}
            for sid, fold in self._sessions.items():
                try:
                    done = fold.finish()
                except Exception:  # noqa: BLE001
                    done = None
                if done is not None:
                    out[sid] = done
            return out
