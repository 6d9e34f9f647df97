"""Dialect decoders: `dialect_for(method, path)` picks the one that owns a request.

`DIALECTS` lists every dialect; each declares its routes and `Dialect` (decoders.base) matches
them by one rule for all, over HTTP (the recorder addon) and WebSocket (the WebSocket addon)
alike. Matching is cheap and reads only the method and the path.
"""

from __future__ import annotations

from forge_record.decoders import (
    anthropic_messages,
    gemini,
    openai_chat,
    openai_completions,
    openai_responses,
    sglang_generate,
)
from forge_record.decoders.base import Dialect, ResponseDecoder, routable

# Matching is by the end of the path, so order would matter only if two dialects' routes
# could overlap; these (…/v1/messages, …/chat/completions, …/responses, …/models/M:method,
# …/v1internal:method, …/completions but not …/chat/completions, …/generate) do not
# (tests/test_routing.py checks every pair).
DIALECTS: tuple[Dialect, ...] = (
    anthropic_messages.DIALECT,
    openai_chat.DIALECT,  # …/chat/completions
    openai_responses.DIALECT,
    openai_completions.DIALECT,  # …/completions (engines: vLLM, SGLang)
    sglang_generate.DIALECT,  # SGLang's native …/generate
    *gemini.DIALECTS,  # …/models/{model}:{method} and …/v1internal:{method}
)

__all__ = ["DIALECTS", "Dialect", "ResponseDecoder", "dialect_for", "dialect_named"]


def dialect_for(method: str, path: str, *, websocket: bool = False) -> Dialect | None:
    """The dialect a request belongs to, or None when it is not a model call we know.
    `websocket`: the request is an upgrade to a WebSocket (GET, `Upgrade: websocket`)."""
    route = routable(method, path, websocket)  # read once, for every dialect
    if route is None:
        return None
    return next((d for d in DIALECTS if d.match_route(route, websocket)), None)


def dialect_named(name: str) -> Dialect | None:
    return next((d for d in DIALECTS if d.name == name), None)
