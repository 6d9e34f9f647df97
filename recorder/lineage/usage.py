"""Token accounting over placed calls: each API call counted once, side calls apart.

Contract: `usage_of(seqs, calls, signals)` sums the calls named by `seqs` (each once, even
if named twice) into
`{input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, tokens_in, calls,
retries, side_calls, retry: {tokens}, side: {tokens}}`:
- the top-level token fields are the conversation's spend: main and subagent calls and their
  retries (a retry that answered is where the tokens went; one that failed before any
  output reports none);
- `retry` repeats the retries' share of it; `calls` counts logical calls, `retries` the
  extra attempts;
- `side` sums side calls (titles, compaction, warm-ups), which are not in the top-level
  fields; count_tokens answers measure a prompt, they are not spend, so they add nothing.

This is the one definition of the counts people read: `run`'s closing line, `sessions`,
`show`, `view` and the exports all take "calls", "retries", "side calls" and "tokens in" from
here. "Tokens in" (`tokens_in`) is every prompt token the model read: uncached input plus
cache reads plus cache writes (records keep `input_tokens` uncached for every API, so the sum
means the same for Anthropic, OpenAI and Gemini); the parts are shown beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
TOKENS_IN = ("input_tokens", "cache_read_tokens", "cache_write_tokens")


def tokens_in(usage: Any) -> int:
    """Every prompt token read, from a usage dict (these keys) or a records.Usage."""
    get = usage.get if isinstance(usage, Mapping) else lambda k: getattr(usage, k, None)
    return sum(get(k) or 0 for k in TOKENS_IN)


def usage_of(seqs: Iterable[int], calls: Mapping[int, Any], signals: Mapping[int, Any]
             ) -> dict[str, Any]:
    total, retry, side = _zero(), _zero(), _zero()
    counts = {"calls": 0, "retries": 0, "side_calls": 0}
    for seq in sorted(set(seqs)):
        call, tokens = calls[seq], signals[seq].usage
        if call.role == "side" or (call.role == "retry" and call.side_kind):
            counts["side_calls" if call.role == "side" else "retries"] += 1
            if call.side_kind not in ("count_tokens", "engine"):  # no tokens of their own
                _add(side, tokens)
            continue
        _add(total, tokens)
        if call.role == "retry":
            counts["retries"] += 1
            _add(retry, tokens)
        else:
            counts["calls"] += 1
    for tokens in (total, retry, side):
        tokens["tokens_in"] = tokens_in(tokens)
    return {**total, **counts, "retry": retry, "side": side}


def _zero() -> dict[str, int]:
    return dict.fromkeys(TOKENS, 0)


def _add(into: dict[str, int], tokens: Mapping[str, int]) -> None:
    for field in TOKENS:
        into[field] += tokens.get(field, 0) or 0
