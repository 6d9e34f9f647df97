"""SGLang's native generate API: `POST …/generate`, the token-in/token-out route RL trainers
call (slime, Dressage); SSE or JSON.

Requests: `text` (a string; a list is a batch) or `input_ids` is one user message (Text, or
Other `{"type": "prompt_ids", "ids": [...]}`); `sampling_params` and every other field go to
`parameters`.

Responses: an object `{text, output_ids, meta_info}` (a list of them for a batch or `n` > 1:
the first is the Response, the others go to `extras["choices"]`). `meta_info` gives the stop
reason (`finish_reason.type`: "stop", "length", "abort"; its `matched` stays in extras), the
usage (`prompt_tokens`, `completion_tokens`, `cached_tokens`) and the engine's tokens:
`output_ids`, `output_token_logprobs` as `[logprob, token_id, text]` triples (their ids are
checked against `output_ids` by finalize), `output_top_logprobs` per position, the prompt's
ids (`input_ids` when the request gave them; `input_token_logprobs` triples when asked from
the start of the prompt) and `weight_version`.

A stream sends `data: {...}` lines whose `text`, `output_ids` and logprob lists are
cumulative (SGLang's default): each line replaces the last, per `index`; a line whose ids do
not start with the ones before is taken as a delta and appended (`incremental_streaming_
output`). `data: [DONE]` completes it.
"""

from __future__ import annotations

from typing import Any

import orjson

from forge_record.decoders.base import (
    SHAPE_ERRORS,
    Dialect,
    JsonBodyDecoder,
    is_event_stream,
    load_object,
)
from forge_record.errors import DecodeError
from forge_record.records import Message, Other, Request, Response, Text, Tokens, Usage
from forge_record.sse import SSEDecoder

_REQUEST_OWN_FIELDS = {"text", "input_ids", "stream"}
_TRIPLES = ("output_token_logprobs", "input_token_logprobs")
_OWN_META = {"finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens",
             "output_token_logprobs", "output_top_logprobs", "weight_version"}


def parse_generate_request(data: dict[str, Any]) -> Request:
    text, ids = data.get("text"), data.get("input_ids")
    blocks: list[Any] = []
    if isinstance(text, str):
        blocks = [Text(text=text)]
    elif isinstance(text, list):
        blocks = [Text(text=t) for t in text if isinstance(t, str)]
    elif isinstance(ids, list) and ids:
        batch = ids if isinstance(ids[0], list) else [ids]
        blocks = [Other(data={"type": "prompt_ids", "ids": one}) for one in batch]
    return Request(
        model=data.get("model"),
        messages=[Message(role="user", content=blocks)] if blocks else [],
        stream=bool(data.get("stream")),
        parameters={k: v for k, v in data.items() if k not in _REQUEST_OWN_FIELDS},
    )


def generate_tokens(answer: dict[str, Any], input_ids: list[int] | None) -> Tokens | None:
    """The engine's tokens in one `/generate` answer, or None when it sent no ids."""
    meta = answer.get("meta_info") or {}
    ids = answer.get("output_ids")
    triples = meta.get("output_token_logprobs")
    if ids is None and triples:
        ids = [t[1] for t in triples]
    if ids is None:
        return None
    prompt_ids = input_ids
    given = meta.get("input_token_logprobs")
    if prompt_ids is None and given and len(given) == meta.get("prompt_tokens"):
        prompt_ids = [t[1] for t in given]  # the whole prompt (`logprob_start_len: 0`)
    tokens = Tokens(prompt_ids=prompt_ids, ids=list(ids))
    if triples:
        tokens.logprobs = [t[0] for t in triples]

    tops = meta.get("output_top_logprobs")
    if tops and any(tops):
        # [text (the id when SGLang sent no text), logprob], as chat's [token, logprob]
        tokens.top_logprobs = [[[_token(t), t[0]] for t in top or ()] for top in tops]
    return tokens


def _token(triple: list[Any]) -> Any:
    return triple[2] if len(triple) > 2 and triple[2] is not None else triple[1]


def generate_response(answers: list[dict[str, Any]], input_ids: list[int] | None = None
                      ) -> Response:
    if not answers:
        return Response()
    first, *others = answers
    meta = dict(first.get("meta_info") or {})
    finish = meta.get("finish_reason")
    response = Response(id=meta.get("id"), stop_reason=finish.get("type")
                        if isinstance(finish, dict) else finish)
    if first.get("text"):
        response.content = [Text(text=first["text"])]
    cached = meta.get("cached_tokens")
    prompt = meta.get("prompt_tokens")
    response.usage = Usage(
        input_tokens=prompt - (cached or 0) if isinstance(prompt, int) else None,
        output_tokens=meta.get("completion_tokens"),
        cache_read_tokens=cached or None)
    response.tokens = generate_tokens(first, input_ids)
    triples = meta.get("output_token_logprobs") or []
    if response.tokens is not None and [t[1] for t in triples] not in ([], response.tokens.ids):
        # ids that disagree with output_ids: kept, for tokens_check to flag
        response.extras["logprob_token_ids"] = [t[1] for t in triples]
    if meta.get("weight_version") is not None:
        response.extras["weight_version"] = meta["weight_version"]
    if isinstance(finish, dict) and len(finish) > 1:
        response.extras["finish_reason"] = finish
    rest = {k: v for k, v in meta.items() if k not in _OWN_META and k != "id"}
    if response.tokens is None and meta.get("output_token_logprobs"):
        rest["output_token_logprobs"] = meta["output_token_logprobs"]
    if rest:
        response.extras["meta_info"] = rest
    if others:
        response.extras["choices"] = [{"index": i, "text": a.get("text"),
                                       "output_ids": a.get("output_ids"),
                                       "finish_reason": (a.get("meta_info") or {}).get(
                                           "finish_reason")}
                                      for i, a in enumerate(others, 1)]
    return response


def _answers(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list) and all(isinstance(a, dict) for a in data):
        return data
    raise DecodeError("response body is not a generate answer")


class _JsonDecoder(JsonBodyDecoder):
    def __init__(self) -> None:
        super().__init__(lambda data: Response())

    def finish(self) -> Response:
        try:
            data = orjson.loads(self.body)
        except orjson.JSONDecodeError as e:
            raise DecodeError(f"response body is not JSON: {e}") from e
        if isinstance(data, dict) and "error" in data and "meta_info" not in data:
            error = data["error"]
            response = Response(error=error if isinstance(error, dict) else {"message": error})
        elif isinstance(data, dict) and data.get("object") == "error":  # SGLang's error body
            response = Response(error=data)
        else:
            try:
                response = generate_response(_answers(data))
            except SHAPE_ERRORS as e:
                raise DecodeError(f"response body has an unexpected shape: {e!r}") from e
        self._complete = True
        return response


class _StreamDecoder:
    """Cumulative `data:` lines, the last per index kept (see the module docstring)."""

    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self._latest: dict[int, dict[str, Any]] = {}
        self._error: dict[str, Any] | None = None
        self._undecoded: list[str] = []
        self._done = False

    @property
    def complete(self) -> bool:
        return self._done

    def feed(self, chunk: bytes) -> None:
        for event in self._sse.feed(chunk):
            self._on_data(event.data)

    def finish(self) -> Response:
        for event in self._sse.flush():
            self._on_data(event.data)
        response = generate_response([self._latest[i] for i in sorted(self._latest)])
        response.error = self._error
        if self._undecoded:
            response.extras["undecoded_events"] = self._undecoded
        return response

    def _on_data(self, data: str) -> None:
        if data.startswith("[DONE]"):
            self._done = True
            return
        try:
            answer = orjson.loads(data)
        except orjson.JSONDecodeError:
            self._undecoded.append(data)
            return
        if not isinstance(answer, dict) or "error" in answer:
            error = answer.get("error") if isinstance(answer, dict) else None
            self._error = error if isinstance(error, dict) else {"message": data}
            return
        index = answer.get("index") or 0
        before = self._latest.get(index)
        self._latest[index] = answer if before is None else _follow(before, answer)


def _follow(before: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """`now` as a cumulative answer: itself when it is one, else `before` with it appended."""
    old, new = before.get("output_ids") or [], now.get("output_ids") or []
    if new[: len(old)] == old:
        return now
    merged = {**now, "text": (before.get("text") or "") + (now.get("text") or ""),
              "output_ids": old + new}
    meta, old_meta = dict(now.get("meta_info") or {}), before.get("meta_info") or {}
    for key in (*_TRIPLES, "output_top_logprobs"):
        if key in old_meta or key in meta:
            meta[key] = (old_meta.get(key) or []) + (meta.get(key) or [])
    merged["meta_info"] = meta
    return merged


class SGLangGenerate(Dialect):
    name = "sglang.generate"
    # …/generate, but not vLLM's token route …/inference/v1/generate (another shape)
    routes = {"(?<!/v1)/generate": "model"}
    body_keys = (b'"input_ids"', b'"sampling_params"')

    def parse_request(self, body: bytes) -> Request:
        data = load_object(body, "request body")
        try:
            return parse_generate_request(data)
        except SHAPE_ERRORS as e:
            raise DecodeError(f"request body has an unexpected shape: {e!r}") from e

    def response_decoder(self, content_type: str) -> _StreamDecoder | _JsonDecoder:
        if is_event_stream(content_type):
            return _StreamDecoder()
        return _JsonDecoder()


DIALECT = SGLangGenerate()
