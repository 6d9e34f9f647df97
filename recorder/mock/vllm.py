"""The mock as a vLLM server, for what the chat mode (mock/engine.py) does not cover:
`GET /version` and `GET /v1/models`, and `POST /v1/completions`, JSON or SSE, with vLLM
0.32.0's field map (docs/ROLLOUTS.md §1): per choice `text`, `token_ids` and
`prompt_token_ids` (inside the choice; streamed, in the first chunk only), `logprobs{tokens,
token_logprobs, top_logprobs, text_offset}` when `logprobs: N` is asked, the top N per
position (the sampled token, the likeliest here, first); every field not asked for is null.
A token is a byte (mock/engine_tokens). Active when `options["engine"] == "vllm"`; otherwise
404, as any other server. `options["engine_ignores_token_ids"]` answers as a vLLM before
0.10.2 (no token id fields at all); `options["engine_drops_logprob"]` leaves one streamed
logprob out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from forge_record.mock import NOT_FOUND, MockUpstream, Received, Reply
from forge_record.mock import engine_tokens as tok

VERSION = "0.32.0"
CREATED = 1_767_225_600


def active(mock: MockUpstream) -> bool:
    return mock.options.get("engine") == "vllm"


def _version(mock: MockUpstream, received: Received) -> Reply:
    return Reply.json({"version": VERSION}) if active(mock) else NOT_FOUND


def _models(mock: MockUpstream, received: Received) -> Reply:
    if mock.options.get("engine") not in ("vllm", "sglang"):  # both serve the OpenAI routes
        return NOT_FOUND
    return Reply.json({"object": "list", "data": [{"id": mock.options.get("model", "tiny"),
                                                   "object": "model", "owned_by": "vllm"}]})


def _prompt_ids(request: dict[str, Any]) -> list[int]:
    prompt = request.get("prompt")
    if isinstance(prompt, list) and all(isinstance(i, int) for i in prompt):
        return prompt  # token in
    return tok.encode(prompt if isinstance(prompt, str) else "")


def _logprobs(ids: list[int], start: int, top: int, scale: float) -> dict[str, Any]:
    texts = [tok.token_text(i) for i in ids]
    return {"text_offset": [start + k for k in range(len(ids))],
            "token_logprobs": [tok.logprob(start + k) * scale for k in range(len(ids))],
            "tokens": texts,
            "top_logprobs": [{tok.token_text(t): lp for t, lp in
                              tok.alternatives(i, start + k, max(top, 1), scale)}
                             for k, i in enumerate(ids)] if top else None}


def _choice(request: dict[str, Any], mock: MockUpstream, ids: list[int], start: int,
            prompt_ids: list[int] | None, finish: str | None) -> dict[str, Any]:
    asked_ids = request.get("return_token_ids") is True
    top = request.get("logprobs")
    scale = tok.scale(mock.options, request.get("temperature", 1.0))
    choice: dict[str, Any] = {
        "index": 0, "text": "".join(tok.token_text(i) for i in ids),
        "logprobs": _logprobs(ids, start, top, scale) if type(top) is int else None,
        "finish_reason": finish, "stop_reason": None}
    if not mock.options.get("engine_ignores_token_ids"):
        choice["token_ids"] = ids if asked_ids else None
        choice["prompt_logprobs"] = None
        choice["prompt_token_ids"] = prompt_ids if asked_ids else None
    return choice


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
            "completion_tokens": completion, "prompt_tokens_details": None}


def _completions(mock: MockUpstream, received: Received) -> Reply:
    if not active(mock):
        return NOT_FOUND
    request = received.json()
    prompt_ids = _prompt_ids(request)
    ids, finish = tok.answer(mock.options, request.get("max_tokens", 16))
    # the id derives from the prompt alone: the proxy adds fields to the body
    top = {"id": f"cmpl-mock{sum(prompt_ids) % 100_000}", "object": "text_completion",
           "created": CREATED, "model": request.get("model", "tiny")}
    if not request.get("stream"):
        return Reply.json({**top, "choices": [_choice(request, mock, ids, 0, prompt_ids, finish)],
                           "service_tier": None, "system_fingerprint": None,
                           "usage": _usage(len(prompt_ids), len(ids)),
                           "kv_transfer_params": None})
    return Reply.stream(_chunks(mock, request, top, prompt_ids, ids, finish))


def _chunks(mock: MockUpstream, request: dict[str, Any], top: dict[str, Any],
            prompt_ids: list[int], ids: list[int], finish: str) -> Iterator[bytes]:
    usage = (request.get("stream_options") or {}).get("include_usage")
    for k in range(0, len(ids), 2):  # two tokens a chunk
        piece = ids[k:k + 2]
        last = k + 2 >= len(ids)
        choice = _choice(request, mock, piece, k, prompt_ids if k == 0 else None,
                         finish if last else None)
        if k == 0 and mock.options.get("engine_drops_logprob") and choice["logprobs"]:
            for key in ("token_logprobs", "tokens", "text_offset"):
                choice["logprobs"][key] = choice["logprobs"][key][:-1]
        if "prompt_token_ids" in choice and k:
            del choice["prompt_token_ids"]  # the first chunk only
            del choice["prompt_logprobs"]
        yield b"data: " + orjson.dumps({**top, "choices": [choice], "usage": None}) + b"\n\n"
    if usage:
        yield b"data: " + orjson.dumps({**top, "choices": [], "usage": _usage(
            len(prompt_ids), len(ids))}) + b"\n\n"
    yield b"data: [DONE]\n\n"


ROUTES = [
    ("GET", lambda path: path == "/version", _version),
    ("GET", lambda path: path.endswith("/v1/models"), _models),
    ("POST", lambda path: path.endswith("/completions") and not path.endswith(
        "/chat/completions"), _completions),
]
