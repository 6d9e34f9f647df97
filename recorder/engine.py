"""Engine upstreams: ask an open-weights engine for its own tokens, hand the agent its answer.

On-policy RL needs the ids the policy sampled and their logprobs, which only the engine has.
When a Chat Completions call goes to an engine (vLLM), `ask_for_tokens` adds
`return_token_ids` and `logprobs` (and `top_logprobs`, if configured) to the request, and
says what the agent itself had asked for. The record keeps the engine's whole answer
(decoders.openai_chat puts the ids in `response.tokens`). What goes back to the agent is the
answer it would have had without our additions: `Strip` sets each field the agent did not
ask for to null, as the engine itself sends it then (vLLM writes `"prompt_token_ids":null`,
`"token_ids":null`, `"logprobs":null` on an unasked call), and cuts `top_logprobs` lists
down to what the agent asked. So a client sees the same bytes, field for field, as from the
engine directly.

`Strip` is an incremental fold like the decoders: a stream is passed on line by line as it
arrives (sse.LineFramer frames it; only a line not yet ended is held back), a whole JSON body
at its end. A line or body that is not the JSON expected is passed on unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from forge_record.sse import LineFramer


@dataclass(frozen=True)
class Asked:
    """What the agent's own request asked for, of the fields we add."""

    token_ids: bool = False
    logprobs: bool = False
    top_logprobs: int = 0


def ask_for_tokens(body: bytes, top_logprobs: int = 0) -> tuple[bytes, Asked] | None:
    """The Chat Completions request `body` asking for token ids and logprobs, and what the
    agent had asked for itself; None when the body is not a JSON object (sent on as is)."""
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(request, dict):
        return None
    asked = Asked(token_ids=request.get("return_token_ids") is True,
                  logprobs=request.get("logprobs") is True,
                  top_logprobs=_int(request.get("top_logprobs")))
    request["return_token_ids"] = True
    request["logprobs"] = True
    if max(top_logprobs, asked.top_logprobs):
        request["top_logprobs"] = max(top_logprobs, asked.top_logprobs)
    return orjson.dumps(request), asked


class Strip:
    """The engine's answer, less what the agent did not ask for (see the module docstring)."""

    def __init__(self, asked: Asked, streamed: bool) -> None:
        self.asked = asked
        self.streamed = streamed
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
        self._strip(answer)
        if self.streamed and not self.asked.token_ids and _says_nothing(answer):
            return None
        return orjson.dumps(answer)

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


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
