"""The numbers reserved for one flow's calls, oldest first.

`serve` numbers each call in its session's sequence as the call starts (Gateway.reserve: the
UPDATE runs in the gateway's thread pool, the event loop only submits it), not as it ends. A
call that a killed replica was carrying so leaves its number behind with no exchange: a gap,
which reads as a missing call (store.gateway.missing_calls).

A flow carries one call (HTTP) or one per turn (a Responses WebSocket), announced by the
recorders through the flow's STARTED hook (addons.recorder). Its exchanges reach the sink in
the order their calls started, so each takes the oldest reservation left. A flow that yields
more exchanges than it started calls (a bridged call's engine record, kind "engine") has none
left for the extra ones: those are numbered as they complete, as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future


class Reservations:
    def __init__(self, reserve: Callable[[], Future | None]) -> None:
        self._reserve = reserve
        self._held: deque[Future | None] = deque()

    def started(self) -> None:
        """On the event loop: a call of the flow starts; ask for its number."""
        self._held.append(self._reserve())

    def take(self) -> Future | None:
        """On the event loop: the oldest reservation not used yet, or None when there is
        none (an extra exchange) or none was asked for."""
        return self._held.popleft() if self._held else None

    def __len__(self) -> int:
        return len(self._held)
