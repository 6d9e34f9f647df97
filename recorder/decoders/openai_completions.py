"""The OpenAI (legacy) Completions dialect: `POST …/completions` (not `…/chat/completions`),
as vLLM and SGLang serve it for token-level clients and trainers; SSE or JSON.

Requests: `prompt` (a string, a list of strings, or token ids: vLLM takes them "token in")
is one user message, Text for a string, Other `{"type": "prompt_ids", "ids": [...]}` for
ids; every other field goes to `parameters`.

Responses: choice 0's `text` is the Response's Text, `finish_reason` its stop reason; other
choices go to `extras["choices"]`. An engine's tokens go to `response.tokens`: per choice
`prompt_token_ids` (inside the choice, unlike chat; streamed, in the first chunk only),
`token_ids` (streamed: each chunk's delta) and `logprobs{tokens, token_logprobs,
top_logprobs, text_offset}`, whose `top_logprobs` maps become `[token, logprob]` pairs.
The stream fold concatenates `text`, extends the id and logprob lists, keeps the last
`finish_reason`, `stop_reason` and non-null `usage`; `[DONE]` completes it.
"""

from __future__ import annotations

from typing import Any

from forge_record.decoders.base import (
    Dialect,
    JsonBodyDecoder,
    decode_object,
    is_event_stream,
)
from forge_record.decoders.openai_chat import FoldedStream, chat_usage
from forge_record.records import Message, Other, Request, Response, Text, Tokens

_REQUEST_OWN_FIELDS = {"model", "prompt", "stream"}
_TOP_OWN_FIELDS = {"id", "model", "choices", "usage", "object", "error"}
_LOGPROB_LISTS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")


def _prompt_blocks(prompt: Any) -> list[Any]:
    if isinstance(prompt, str):
        return [Text(text=prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        return [Other(data={"type": "prompt_ids", "ids": prompt})]
    if isinstance(prompt, list):  # a batch: one block per prompt
        return [b for p in prompt for b in _prompt_blocks(p)]
    return []


def parse_completions_request(data: dict[str, Any]) -> Request:
    prompt = _prompt_blocks(data.get("prompt"))
    return Request(
        model=data.get("model"),
        messages=[Message(role="user", content=prompt)] if prompt else [],
        stream=bool(data.get("stream")),
        parameters={k: v for k, v in data.items() if k not in _REQUEST_OWN_FIELDS},
    )


def completion_tokens(choice: dict[str, Any]) -> Tokens | None:
    """The engine's ids and logprobs in a completions choice, or None when it sent no ids."""
    ids, prompt_ids = choice.get("token_ids"), choice.get("prompt_token_ids")
    if ids is None and prompt_ids is None:
        return None
    tokens = Tokens(prompt_ids=prompt_ids, ids=ids)
    logprobs = choice.get("logprobs") or {}
    if logprobs.get("token_logprobs") is not None:
        tokens.logprobs = list(logprobs["token_logprobs"])
    tops = logprobs.get("top_logprobs")
    if tops and any(tops):
        tokens.top_logprobs = [[[t, lp] for t, lp in (top or {}).items()] for top in tops]
    return tokens


def completions_response(obj: dict[str, Any]) -> Response:
    """A Completion object (a JSON body, or the stream's fold) as a Response."""
    choices = sorted(obj.get("choices") or (), key=lambda c: c.get("index") or 0)
    extras = {k: v for k, v in obj.items() if k not in _TOP_OWN_FIELDS and v is not None}
    response = Response(id=obj.get("id"), model=obj.get("model"),
                        usage=chat_usage(obj.get("usage")), extras=extras)
    if not choices:
        return response
    first, *others = choices
    if first.get("text"):
        response.content = [Text(text=first["text"])]
    response.stop_reason = first.get("finish_reason")
    response.tokens = completion_tokens(first)
    logprobs = {k: v for k, v in (first.get("logprobs") or {}).items() if v}
    if response.tokens is not None and response.tokens.logprobs is not None:
        # the lists live on in tokens, once; the token strings and offsets stay here
        logprobs.pop("token_logprobs", None)
        logprobs.pop("top_logprobs", None)
    if logprobs:
        extras["logprobs"] = logprobs
    if first.get("stop_reason") is not None:
        extras["stop_reason"] = first["stop_reason"]
    if others:
        extras["choices"] = [{"index": c.get("index"), "text": c.get("text"),
                              "finish_reason": c.get("finish_reason")} for c in others]
    return response


def _body_response(data: dict[str, Any]) -> Response:
    if isinstance(data.get("error"), dict) and "choices" not in data:
        return Response(error=data["error"], extras={k: v for k, v in data.items()
                                                     if k != "error"})
    return completions_response(data)


class CompletionsFold:
    """Completion chunks into one Completion-shaped dict (see the module docstring)."""

    def __init__(self) -> None:
        self._top: dict[str, Any] = {}
        self._usage: dict[str, Any] | None = None
        self._choices: dict[int, dict[str, Any]] = {}

    def apply(self, chunk: dict[str, Any]) -> None:
        for key, value in chunk.items():
            if key not in ("choices", "usage") and value is not None:
                self._top[key] = value
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        for raw in chunk.get("choices") or ():
            index = raw.get("index") or 0
            if not isinstance(index, int):
                raise TypeError("choice index is not an integer")
            self._add(self._choices.setdefault(index, {"index": index, "text": []}), raw)

    @staticmethod
    def _add(choice: dict[str, Any], raw: dict[str, Any]) -> None:
        if raw.get("text"):
            if not isinstance(raw["text"], str):
                raise TypeError("completion text is not a string")
            choice["text"].append(raw["text"])
        if ids := raw.get("token_ids"):
            choice.setdefault("token_ids", []).extend(ids)
        for key in ("prompt_token_ids", "finish_reason", "stop_reason"):
            if raw.get(key) is not None:
                choice[key] = raw[key]
        for key, entries in (raw.get("logprobs") or {}).items():
            if key in _LOGPROB_LISTS and entries:
                choice.setdefault("logprobs", {}).setdefault(key, []).extend(entries)

    def snapshot(self) -> dict[str, Any]:
        choices = [{**c, "text": "".join(c["text"])} for _, c in sorted(self._choices.items())]
        return {**self._top, "choices": choices, "usage": self._usage}


class OpenAICompletions(Dialect):
    name = "openai.completions"
    # …/completions, but not …/chat/completions (the chat dialect's)
    routes = {"(?<!/chat)/completions": "model"}
    body_keys = (b'"prompt"',)

    def parse_request(self, body: bytes) -> Request:
        return decode_object(body, "request body", parse_completions_request)

    def response_decoder(self, content_type: str) -> FoldedStream | JsonBodyDecoder:
        if is_event_stream(content_type):
            return FoldedStream(CompletionsFold(), completions_response)
        return JsonBodyDecoder(_body_response)


DIALECT = OpenAICompletions()
