"""The calls one flow has started and not yet handed over, oldest first.

`serve` numbers each call in its session's sequence as the call starts, not as it ends: the
flow's call-start hook (addons.recorder.STARTED; once per HTTP call, once per Responses
WebSocket turn) names the call and tells the writer process, which reserves the session's
next number for it (store.items.StartCall). A call that a killed replica was carrying so
leaves its number behind with no exchange: a gap, which reads as a missing call
(store.gateway.missing_calls).

A flow's exchanges reach the sink in the order their calls started, so each is handed over
under the oldest call name left. A flow that yields more exchanges than it started calls (a
bridged call's engine record, kind "engine") has none left for the extra ones: the writer
numbers those as it writes them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable


class Reservations:
    def __init__(self, start: Callable[[], str]) -> None:
        self._start = start
        self._held: deque[str] = deque()

    def started(self) -> None:
        """On the event loop: a call of the flow starts."""
        self._held.append(self._start())

    def take(self) -> str | None:
        """On the event loop: the oldest started call not handed over yet, or None (an
        extra exchange)."""
        return self._held.popleft() if self._held else None

    def __len__(self) -> int:
        return len(self._held)
