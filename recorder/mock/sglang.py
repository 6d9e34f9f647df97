"""The mock as an SGLang server: `POST /generate` (JSON, or SSE with `"stream": true`),
`GET /get_model_info` and `GET /get_server_info`, with SGLang's field map (docs/ROLLOUTS.md
§1): `text`, `output_ids` and `meta_info` (`id`, `finish_reason{type, matched|length}`,
`prompt_tokens`, `completion_tokens`, `cached_tokens`, `weight_version`, and with
`return_logprob` the `[logprob, token_id, text]` triples of `output_token_logprobs` (text
null unless `return_text_in_logprobs`), `output_top_logprobs` when `top_logprobs_num` > 0,
and `input_token_logprobs` from `logprob_start_len` (default: the last prompt token only;
the first prompt token's logprob is null). A stream sends the cumulative answer after every
two tokens, then `data: [DONE]`. A token is a byte (mock/engine_tokens). Active when
`options["engine"] == "sglang"`; `options["weight_version"]` (default "default", as SGLang)
is reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from forge_record.mock import NOT_FOUND, MockUpstream, Received, Reply
from forge_record.mock import engine_tokens as tok

VERSION = "0.5.6"
EOS = 2


def active(mock: MockUpstream) -> bool:
    return mock.options.get("engine") == "sglang"


def _model_info(mock: MockUpstream, received: Received) -> Reply:
    if not active(mock):
        return NOT_FOUND
    return Reply.json({"model_path": mock.options.get("model", "tiny"),
                       "tokenizer_path": mock.options.get("model", "tiny"),
                       "is_generation": True, "preferred_sampling_params": None,
                       "weight_version": _weight_version(mock)})


def _server_info(mock: MockUpstream, received: Received) -> Reply:
    if not active(mock):
        return NOT_FOUND
    return Reply.json({"version": VERSION, "model_path": mock.options.get("model", "tiny")})


def _weight_version(mock: MockUpstream) -> str:
    return str(mock.options.get("weight_version", "default"))


def _triple(request: dict[str, Any], token_id: int, lp: float | None) -> list[Any]:
    text = tok.token_text(token_id) if request.get("return_text_in_logprobs") else None
    return [lp, token_id, text]


def _answer(mock: MockUpstream, request: dict[str, Any], prompt_ids: list[int],
            ids: list[int], finish: dict[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"id": request.get("rid") or f"mock{len(prompt_ids)}",
                            "finish_reason": finish, "prompt_tokens": len(prompt_ids),
                            "weight_version": _weight_version(mock),
                            "completion_tokens": len(ids), "cached_tokens": 0}
    if request.get("return_logprob"):
        scale = tok.scale(mock.options, (request.get("sampling_params") or {}).get(
            "temperature", 1.0))
        start = request.get("logprob_start_len", -1)
        start = len(prompt_ids) - 1 if start is None or start < 0 else start
        meta["input_token_logprobs"] = [
            _triple(request, t, None if k == 0 else tok.logprob(k))
            for k, t in enumerate(prompt_ids) if k >= start]
        meta["output_token_logprobs"] = [_triple(request, t, tok.logprob(k) * scale)
                                         for k, t in enumerate(ids)]
        top = request.get("top_logprobs_num") or 0
        if top:
            meta["input_top_logprobs"] = [None for k in prompt_ids[start:]]
            meta["output_top_logprobs"] = [[_triple(request, a, lp) for a, lp in
                                            tok.alternatives(t, k, top, scale)]
                                           for k, t in enumerate(ids)]
    meta["e2e_latency"] = 0.01
    return {"text": "".join(tok.token_text(i) for i in ids), "output_ids": ids,
            "meta_info": meta}


def _generate(mock: MockUpstream, received: Received) -> Reply:
    if not active(mock):
        return NOT_FOUND
    request = received.json()
    ids_in = request.get("input_ids")
    prompt_ids = ids_in if isinstance(ids_in, list) else tok.encode(request.get("text") or "")
    params = request.get("sampling_params") or {}
    ids, why = tok.answer(mock.options, params.get("max_new_tokens", 128))
    finish = ({"type": "length", "length": len(ids)} if why == "length"
              else {"type": "stop", "matched": EOS})
    if not request.get("stream"):
        return Reply.json(_answer(mock, request, prompt_ids, ids, finish))
    return Reply.stream(_chunks(mock, request, prompt_ids, ids, finish))


def _chunks(mock: MockUpstream, request: dict[str, Any], prompt_ids: list[int],
            ids: list[int], finish: dict[str, Any]) -> Iterator[bytes]:
    for k in range(2, len(ids) + 2, 2):
        done = k >= len(ids)
        answer = _answer(mock, request, prompt_ids, ids[:k], finish if done else None)
        yield b"data: " + orjson.dumps(answer) + b"\n\n"
    yield b"data: [DONE]\n\n"


ROUTES = [
    ("GET", lambda path: path == "/get_model_info", _model_info),
    ("GET", lambda path: path == "/get_server_info", _server_info),
    ("POST", lambda path: path.endswith("/generate"), _generate),
]
