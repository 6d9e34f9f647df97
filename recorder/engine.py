"""Engine upstreams: ask an open-weights engine for its own tokens, hand the agent its answer.

On-policy RL needs the ids the policy sampled and their logprobs, which only the engine has.
When a Chat Completions call goes to an engine (vLLM), `ask_for_tokens` adds
`return_token_ids` and `logprobs` (and `top_logprobs`, if configured) to the request, and
says what the agent itself had asked for. A Completions call asks alike, but its `logprobs`
is the number of alternatives (0: the sampled token's alone); an SGLang `/generate` call
asks `return_logprob` (and `top_logprobs_num`): its `output_ids` come unasked. The record
keeps the engine's whole answer (the decoders put the ids in `response.tokens`). What goes
back to the agent is the answer it would have had without our additions: `Strip` sets each
field the agent did not ask for to null, as the engine itself sends it then (vLLM writes
`"prompt_token_ids":null`, `"token_ids":null`, `"logprobs":null` on an unasked call), and
cuts `top_logprobs` lists down to what the agent asked (Completions: each position's
`{token: logprob}` map keeps the sampled token and the agent's top N; `/generate`: the
logprob lists of `meta_info` are removed, as SGLang leaves them out when not asked). So a
client sees the same bytes, field for field, as from the engine directly.

`Strip` is an incremental fold like the decoders: a stream is passed on line by line as it
arrives (sse.LineFramer frames it; only a line not yet ended is held back), a whole JSON body
at its end. A line or body that is not the JSON expected is passed on unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from forge_record.sse import LineFramer

CHAT, COMPLETIONS, GENERATE = "openai.chat", "openai.completions", "sglang.generate"
DIALECTS = (CHAT, COMPLETIONS, GENERATE)  # the dialects whose calls ask an engine for tokens
# what SGLang's meta_info carries only when `return_logprob` was asked
_SGLANG_LOGPROB_KEYS = ("input_token_logprobs", "output_token_logprobs", "input_top_logprobs",
                        "output_top_logprobs", "input_token_ids_logprobs",
                        "output_token_ids_logprobs")


@dataclass(frozen=True)
class Asked:
    """What the agent's own request asked for, of the fields we add."""

    token_ids: bool = False
    logprobs: bool = False
    top_logprobs: int = 0


def ask_for_tokens(body: bytes, top_logprobs: int = 0, dialect: str = CHAT
                   ) -> tuple[bytes, Asked] | None:
    """The request `body` of `dialect` asking for token ids and logprobs, and what the agent
    had asked for itself; None when the body is not a JSON object (sent on as is)."""
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(request, dict):
        return None
    asked = _ASK[dialect](request, top_logprobs)
    return orjson.dumps(request), asked


def _ask_chat(request: dict[str, Any], top: int) -> Asked:
    asked = Asked(token_ids=request.get("return_token_ids") is True,
                  logprobs=request.get("logprobs") is True,
                  top_logprobs=_int(request.get("top_logprobs")))
    request["return_token_ids"] = True
    request["logprobs"] = True
    if max(top, asked.top_logprobs):
        request["top_logprobs"] = max(top, asked.top_logprobs)
    return asked


def _ask_completions(request: dict[str, Any], top: int) -> Asked:
    # `logprobs: N` asks for the sampled token's logprob and N alternatives; null for none
    logprobs = request.get("logprobs")
    asked = Asked(token_ids=request.get("return_token_ids") is True,
                  logprobs=type(logprobs) is int,  # 0 asks for the sampled one alone
                  top_logprobs=_int(logprobs))
    request["return_token_ids"] = True
    request["logprobs"] = max(top, asked.top_logprobs)
    return asked


def _ask_generate(request: dict[str, Any], top: int) -> Asked:
    # SGLang answers `output_ids` (and `input_ids` when given) whatever was asked
    asked = Asked(token_ids=True, logprobs=request.get("return_logprob") is True,
                  top_logprobs=_int(request.get("top_logprobs_num")))
    request["return_logprob"] = True
    if max(top, asked.top_logprobs):
        request["top_logprobs_num"] = max(top, asked.top_logprobs)
    return asked


_ASK = {CHAT: _ask_chat, COMPLETIONS: _ask_completions, GENERATE: _ask_generate}


class Strip:
    """The engine's answer, less what the agent did not ask for (see the module docstring)."""

    def __init__(self, asked: Asked, streamed: bool, dialect: str = CHAT) -> None:
        self.asked = asked
        self.streamed = streamed
        self.dialect = dialect
        self._framer = LineFramer()
        self._body: list[bytes] = []
        self._dropped = False  # the last data line was dropped: so is the blank line ending it

    def feed(self, chunk: bytes) -> list[bytes]:
        """What to send on for `chunk`: the lines it completes (streamed), nothing (whole)."""
        if not self.streamed:
            self._body.append(chunk)
            return []
        block = self._framer.feed(chunk)
        return [self._lines(block)] if block else []

    def flush(self) -> list[bytes]:
        """End of the body: what is left to send on."""
        if not self.streamed:
            return [self._json(b"".join(self._body))]
        rest = self._framer.flush()
        return [self._lines(rest)] if rest else []

    def _lines(self, block: bytes) -> bytes:
        # bytes.splitlines ends lines at \n, \r and \r\n only, as SSE does
        return b"".join(self._line(line) for line in block.splitlines(keepends=True))

    def _line(self, line: bytes) -> bytes:
        dropped, self._dropped = self._dropped, False
        if not line.startswith(b"data: {"):
            return b"" if dropped and not line.strip(b"\r\n") else line
        body = line.rstrip(b"\r\n")
        chunk = self._json(body[6:])
        if chunk is None:  # a chunk the engine sent only because token ids were asked for
            self._dropped = True
            return b""
        return b"data: " + chunk + line[len(body):]

    def _json(self, data: bytes) -> bytes | None:
        """`data` with the fields stripped; None for a stream chunk left with nothing to say."""
        try:
            answer = orjson.loads(data)
        except orjson.JSONDecodeError:
            return data
        if not isinstance(answer, dict):
            return data
        if self.dialect == GENERATE:
            self._strip_generate(answer)
            return orjson.dumps(answer)
        self._strip(answer)
        if (self.streamed and not self.asked.token_ids and self.dialect == CHAT
                and _says_nothing(answer)):
            return None
        return orjson.dumps(answer)

    def _strip_generate(self, answer: dict[str, Any]) -> None:
        meta = answer.get("meta_info")
        if not isinstance(meta, dict):
            return
        if not self.asked.logprobs:
            for key in _SGLANG_LOGPROB_KEYS:
                meta.pop(key, None)
            return
        for key in ("input_top_logprobs", "output_top_logprobs"):
            if not self.asked.top_logprobs:  # SGLang sends them only for a top_logprobs_num
                meta.pop(key, None)
            elif isinstance(meta.get(key), list):
                meta[key] = [top[: self.asked.top_logprobs] if isinstance(top, list) else top
                             for top in meta[key]]

    def _strip(self, answer: dict[str, Any]) -> None:
        if not self.asked.token_ids:
            _null(answer, "prompt_token_ids")
        for choice in answer.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if not self.asked.token_ids:
                _null(choice, "token_ids")
                _null(choice, "prompt_token_ids")
            if not self.asked.logprobs:
                _null(choice, "logprobs")
            elif self.dialect == COMPLETIONS:
                _cut_top_maps(choice.get("logprobs"), self.asked.top_logprobs)
            else:
                _cut_top(choice.get("logprobs"), self.asked.top_logprobs)


def _says_nothing(chunk: dict[str, Any]) -> bool:
    """A chunk whose every choice has an empty delta and nothing else: vLLM sends these
    while its tool-call parser buffers only to carry token ids, and not at all otherwise."""
    choices = chunk.get("choices")
    return (bool(choices) and chunk.get("usage") is None and chunk.get("prompt_token_ids") is None
            and all(isinstance(c, dict) and not c.get("delta") and c.get("finish_reason") is None
                    and c.get("logprobs") is None for c in choices))


def _null(obj: dict[str, Any], key: str) -> None:
    if key in obj:
        obj[key] = None


def _cut_top(logprobs: Any, keep: int) -> None:
    for entry in (logprobs or {}).get("content") or () if isinstance(logprobs, dict) else ():
        if isinstance(entry, dict) and isinstance(entry.get("top_logprobs"), list):
            entry["top_logprobs"] = entry["top_logprobs"][:keep]


def _cut_top_maps(logprobs: Any, keep: int) -> None:
    """Completions: each position's `{token: logprob}` map holds the sampled token first and
    the top alternatives; the agent's `logprobs: N` keeps the sampled one and the top N."""
    tops = logprobs.get("top_logprobs") if isinstance(logprobs, dict) else None
    for i, top in enumerate(tops or ()):
        if isinstance(top, dict) and len(top) > keep:
            ranked = sorted(top.values(), reverse=True)
            floor = ranked[keep - 1] if keep else float("inf")
            first = next(iter(top), None)
            tops[i] = {t: lp for t, lp in top.items() if t == first or lp >= floor}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
