"""The complete context of Responses calls chained by `previous_response_id`.

Over its WebSocket, Codex sends each call only its new input items plus the id of the
response before it; the model sees that response's whole input, then its output, then the
new items. A record of what the model saw must hold all of it, so `ResponseChains.stitch`
rebuilds it: each finished exchange is remembered as a link (its parent link, its new input
messages, then its answer as one assistant message), and an exchange that names a previous
response gets that link's whole chain put in front of its own messages.

Contract:
- It works on records, after `finalize.finalize` has parsed (and redacted) the request and
  the response, so the context holds only what was already cleaned. It runs in the writer
  thread, in the order exchanges were submitted, which is the order they ended: a response
  always ends before a call can name it.
- Only WebSocket exchanges (`ws://`, `wss://`) are chained or remembered. Over HTTP a client
  sends the whole context itself (Codex does), and remembering every such request would cost
  memory that grows with the square of the conversation; links here share their parents, so
  memory grows with the items seen.
- One `ResponseChains` serves a whole recording session: response ids are unique, so a chain
  that goes on over a new connection (a client naming a stored response, which the API
  allows) resolves too. Codex 0.171 does not: on a new socket, after a cut, it sends its
  whole input again (tests/test_serve_replicas.py, the real-Codex test).
- Behind several `serve` replicas the response before may have gone through another one,
  whose writer stored it. With a `lookup` (session id, response id) -> stored exchange
  (store.responses; it may wait for the other writer, boundedly), a previous id not seen
  here is looked up: the stored record already holds its full context, so the link is that
  context plus its answer, and it is remembered like any other.
- A previous id it does not know and cannot look up (the response was made before recording
  began, its exchange could not be decoded, or another writer never stored it) leaves the
  exchange with only its own messages and the flag `unresolved_previous_response`; calls
  chained after it carry the same flag.
- A warm-up (`"generate": false`) becomes a `side` exchange; it is remembered like any call,
  because the next call names it.
- `stitch` never raises: it is a step of the writer's `prepare`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from forge_record.records import Exchange, Message

log = logging.getLogger("forge_record")

DIALECT = "openai.responses"
UNRESOLVED = "unresolved_previous_response"


@dataclass(frozen=True, slots=True)
class _Link:
    parent: _Link | None
    messages: tuple[Message, ...]  # this call's new input, then its answer
    whole: bool  # every response up the chain was known


Lookup = Callable[[str, str], Exchange | None]


class ResponseChains:
    def __init__(self, lookup: Lookup | None = None) -> None:
        self._links: dict[str, _Link] = {}
        self._lookup = lookup

    def __len__(self) -> int:
        return len(self._links)

    def stitch(self, exchange: Exchange, session_id: str | None = None) -> Exchange:
        """The exchange with its request's messages made complete, remembered for the calls
        that will name it. `session_id` lets a previous response be looked up."""
        if not _chained_transport(exchange):
            return exchange
        try:
            self._stitch(exchange, session_id)
        except Exception:  # noqa: BLE001 - the exchange is still stored, as parsed
            log.exception("forge-record: cannot rebuild the context of %s", exchange.url)
        return exchange

    def _stitch(self, exchange: Exchange, session_id: str | None) -> None:
        request = exchange.request
        assert request is not None
        params = request.parameters
        if params.get("generate") is False:
            exchange.kind = "side"
        previous = params.get("previous_response_id")
        parent = self._parent(previous, session_id) if isinstance(previous, str) else None
        whole = previous is None or (parent is not None and parent.whole)
        if not whole and UNRESOLVED not in exchange.flags:
            exchange.flags.append(UNRESOLVED)
        new = list(request.messages)
        if parent is not None:
            request.messages = context(parent) + new
        self._remember(exchange, parent, new, whole)

    def _parent(self, previous: str, session_id: str | None) -> _Link | None:
        """The link of the response named, from memory or else from the store."""
        link = self._links.get(previous)
        if link is not None or self._lookup is None or session_id is None:
            return link
        stored = self._lookup(session_id, previous)
        if stored is None or stored.request is None:
            return None
        answer = _answer(stored)
        link = _Link(None, tuple(list(stored.request.messages) + answer),
                     UNRESOLVED not in stored.flags)
        self._links[previous] = link
        return link

    def _remember(self, exchange: Exchange, parent: _Link | None, new: list[Message],
                  whole: bool) -> None:
        response = exchange.response
        if response is None or not response.id:
            return  # nothing can name it
        self._links[response.id] = _Link(parent, tuple(new + _answer(exchange)), whole)


def _answer(exchange: Exchange) -> list[Message]:
    """The response as the one assistant message the next call's model sees (none if empty)."""
    response = exchange.response
    if response is None or not response.content:
        return []
    return [Message(role="assistant", content=list(response.content))]


def context(link: _Link) -> list[Message]:
    """Every message of the chain ending at `link`, oldest first."""
    chain: list[tuple[Message, ...]] = []
    node: _Link | None = link
    while node is not None:
        chain.append(node.messages)
        node = node.parent
    return [m for messages in reversed(chain) for m in messages]


def _chained_transport(exchange: Exchange) -> bool:
    return (exchange.dialect == DIALECT and exchange.request is not None
            and exchange.url.startswith(("ws://", "wss://")))
