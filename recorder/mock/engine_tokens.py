"""The mock engines' tokenizer and sampler: bytes as tokens, logprobs from positions.

Deterministic and stateless, so a direct call and a proxied one get the same answer, and a
test can compute what the engine must have said: a token is one byte (id = byte + 3, as a
byte-level BPE's first ids), its text that byte; the i-th sampled token's logprob is
`logprob(i)`; its alternatives are the next ids, each less likely. `options["mock_answer"]`
overrides what the mock engines answer. Logprobs are raw (the same at any temperature, as
vLLM's default) unless `options["logprobs_mode"] == "processed_logprobs"`: then they are
divided by the request's temperature (`scale`).
"""

from __future__ import annotations

from typing import Any

ANSWER = "Hello from the mock engine."
OFFSET = 3


def encode(text: str) -> list[int]:
    return [b + OFFSET for b in text.encode()]


def token_text(token_id: int) -> str:
    return bytes([(token_id - OFFSET) % 256]).decode("latin-1")


def logprob(i: int) -> float:
    return -round(0.05 + (i % 7) / 10, 4)


def alternatives(token_id: int, i: int, n: int, scale: float = 1.0) -> list[tuple[int, float]]:
    """The sampled token first, then `n` - 1 others, less likely each."""
    return [(token_id, logprob(i) * scale)] + [(token_id + k, (logprob(i) - k) * scale)
                                               for k in range(1, n)]


def scale(options: dict[str, Any], temperature: Any) -> float:
    """What the logprobs are multiplied by: 1 when raw, 1/T when processed."""
    if options.get("logprobs_mode") != "processed_logprobs":
        return 1.0
    return 1.0 / temperature if isinstance(temperature, (int, float)) and temperature > 0 else 1.0


def answer(options: dict[str, Any], max_tokens: Any) -> tuple[list[int], str]:
    """(ids, finish reason): the answer cut to `max_tokens`."""
    ids = encode(options.get("mock_answer", ANSWER))
    if isinstance(max_tokens, int) and 0 < max_tokens < len(ids):
        return ids[:max_tokens], "length"
    return ids, "stop"
