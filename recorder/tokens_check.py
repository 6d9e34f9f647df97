"""What an engine call's record says about the engine's tokens: flags, never fixes.

Run by finalize (in the writer) once the response is folded and the request parsed. A call
that asked an engine for token ids (`return_token_ids` in chat and completions, any SGLang
`/generate`) and completed without them is flagged `tokens_missing`: an engine that ignores
the field (vLLM before 0.10.2) still gets a message-level record, but no token-level one. A
call whose tokens disagree with themselves (as many logprobs as ids, the ids of SGLang's
logprob triples equal to `output_ids`, as many completions logprob token strings as ids) is
flagged `tokens_mismatch`; the record keeps what the engine sent. SGLang's prompt ids, when
the request gave them as `input_ids`, are put in `response.tokens` here: the answer does not
repeat them.
"""

from __future__ import annotations

from typing import Any

from forge_record.records import COMPLETE, Exchange, Other, Request, Tokens

TOKENS_MISSING = "tokens_missing"
TOKENS_MISMATCH = "tokens_mismatch"
GENERATE = "sglang.generate"
# a logprob triple's id that is not output_ids' (sglang_generate keeps them there)
TRIPLE_IDS = "logprob_token_ids"


def check(ex: Exchange) -> None:
    if ex.response is None or ex.request is None or not _asked_for_ids(ex):
        return
    tokens = ex.response.tokens
    if ex.dialect == GENERATE and tokens is not None and tokens.prompt_ids is None:
        tokens.prompt_ids = _prompt_ids(ex.request)
    if ex.status != COMPLETE:
        return
    if tokens is None or tokens.ids is None or (
            tokens.prompt_ids is None and ex.dialect != GENERATE):
        _flag(ex, TOKENS_MISSING)
    elif _disagrees(tokens, ex.response.extras):
        _flag(ex, TOKENS_MISMATCH)


def _asked_for_ids(ex: Exchange) -> bool:
    if ex.dialect == GENERATE:
        return True
    return ex.request.parameters.get("return_token_ids") is True


def _disagrees(tokens: Tokens, extras: dict[str, Any]) -> bool:
    n = len(tokens.ids or ())
    if tokens.logprobs is not None and len(tokens.logprobs) != n:
        return True
    if tokens.top_logprobs is not None and len(tokens.top_logprobs) != n:
        return True
    if extras.get(TRIPLE_IDS) is not None:
        return True
    strings = (extras.get("logprobs") or {}).get("tokens")  # completions: one per token
    return isinstance(strings, list) and len(strings) != n


def _prompt_ids(request: Request) -> list[int] | None:
    for message in request.messages:
        for block in message.content:
            if isinstance(block, Other) and block.data.get("type") == "prompt_ids":
                return block.data.get("ids")
    return None


def _flag(ex: Exchange, name: str) -> None:
    if name not in ex.flags:
        ex.flags.append(name)
