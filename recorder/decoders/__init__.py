"""Dialect decoders: `dialect_for(method, path)` picks the one that owns a request.

`DIALECTS` lists every dialect in the order they are tried; each one's `matches` is cheap
and looks only at the method and the path (query included).
"""

from __future__ import annotations

from forge_record.decoders import anthropic_messages, gemini, openai_chat, openai_responses
from forge_record.decoders.base import Dialect, ResponseDecoder

# Matching is by path suffix, so order matters only if two suffixes could overlap; these
# (…/messages, …/chat/completions, …/responses, …/responses/compact) do not.
DIALECTS: tuple[Dialect, ...] = (
    anthropic_messages.DIALECT,
    openai_chat.DIALECT,  # …/chat/completions
    openai_responses.DIALECT,
    *gemini.DIALECTS,  # …/models/{model}:{method} and …/v1internal:{method}
)

__all__ = ["DIALECTS", "Dialect", "ResponseDecoder", "dialect_for", "dialect_named"]


def dialect_for(method: str, path: str) -> Dialect | None:
    """The dialect a request belongs to, or None when it is not a model call we know."""
    return next((d for d in DIALECTS if d.matches(method, path)), None)


def dialect_named(name: str) -> Dialect | None:
    return next((d for d in DIALECTS if d.name == name), None)
