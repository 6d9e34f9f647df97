"""The two records of a bridged call, joined in the writer.

A bridged call is recorded as two exchanges (addons/bridged.py): the agent's, in its own
dialect, and the engine's Chat Completions call, kind "engine". Both carry the flag
`bridge:<id>`; the agent's also `bridged`. The engine's is queued first, so the writer folds
it first: `Pairs.join` keeps its `response.tokens` and gives them to the agent's record, whose
own bytes (Anthropic events, say) carry no token ids. The agent's record is then what the
token exports read, as for any call to an engine; the engine's is a side call to them all.

The writer prepares exchanges one at a time in queue order, so the engine's is always seen
first; an agent record whose engine record was not seen (a writer restarted between the two)
is flagged `tokens:missing` rather than guessed at.
"""

from __future__ import annotations

from collections import OrderedDict

from forge_record.records import Exchange, Tokens

BRIDGED = "bridged"
ENGINE_KIND = "engine"
_LINK = "bridge:"
_KEEP = 1024  # engine records waiting for their agent's: far more than calls in flight
MISSING = "tokens:missing"


def link_flag(link: str) -> str:
    return _LINK + link


def link_of(exchange: Exchange) -> str | None:
    """The id shared by a bridged call's two records, or None for any other record."""
    return next((f[len(_LINK):] for f in exchange.flags if f.startswith(_LINK)), None)


class Pairs:
    def __init__(self) -> None:
        self._tokens: OrderedDict[str, Tokens | None] = OrderedDict()

    def join(self, exchange: Exchange) -> Exchange:
        link = link_of(exchange)
        if link is None:
            return exchange
        if exchange.kind == ENGINE_KIND:
            response = exchange.response
            self._tokens[link] = response.tokens if response is not None else None
            while len(self._tokens) > _KEEP:
                self._tokens.popitem(last=False)
            return exchange
        if exchange.kind != "model":  # a token count: no engine record, no tokens
            return exchange
        tokens = self._tokens.pop(link, None)
        if exchange.response is not None and tokens is not None:
            exchange.response.tokens = tokens
        elif exchange.http_status is not None and exchange.http_status < 400:
            exchange.flags.append(MISSING)
        return exchange
