"""The mock's engine mode: Chat Completions as vLLM 0.32 answers it, token ids and all.

The fields follow real answers captured from vLLM (tests/data/vllm): with `return_token_ids`
the prompt's ids are top-level (`prompt_token_ids`; streamed, in the first chunk only, the
role delta), each choice has `token_ids` (streamed: that chunk's delta ids); with
`logprobs`, `logprobs.content[]` entries carry token text, logprob and bytes but no id, and
`top_logprobs` lists the sampled token first. Unasked, those fields are null (`"token_ids":
null`). A tool call streams as vLLM's `hermes` parser sends it: chunks with an empty delta
that only carry ids while the parser buffers `<tool_call>{"name": ...`, one chunk with the
call's id, type and name, then the arguments in fragments. The end-of-turn token is the last
sampled one (empty delta, the finish reason). `stream_options.include_usage` adds the usage
chunk (`choices: []`) before `[DONE]`.

Tokens come from a toy tokenizer (`tokenize`): special tokens whole, then words, spaces and
single marks, each an id from a hash. The prompt is the messages rendered ChatML-style, so
a thread's next prompt starts with this prompt plus the completion's ids, as a real chat
template makes it: the token exports' prefix rule can be tested on it.

What the model says is scripted: `options["engine_script"]` lists turns, the turn for a call
being its number of assistant messages so far, each `{"text", "reasoning", "tool_calls":
[{"name", "arguments"}], "finish"}`; without a script, the shared mock script
(forge_record.mock.openai: a TOOL_MARKER prompt with a tool asks for a call, a tool result is
answered, anything else gets a short text).
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Iterator
from typing import Any

import orjson

from forge_record.mock import MockUpstream, Received, Reply
from forge_record.mock.openai import CREATED, _chat_answer

_SPECIAL = ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>",
            "</think>")
_PIECES = re.compile("|".join(map(re.escape, _SPECIAL)) + r"|\w+|\s+|[^\w\s]")
END = "<|im_end|>"
FINGERPRINT = "vllm-0.32.0-mock"


def token_id(piece: str) -> int:
    if piece in _SPECIAL:
        return 1 + _SPECIAL.index(piece)
    return 16 + zlib.crc32(piece.encode()) % 4000


def pieces(text: str) -> list[str]:
    return _PIECES.findall(text)


def tokenize(text: str) -> list[int]:
    return [token_id(p) for p in pieces(text)]


def render(messages: list[dict], tools: list[dict] | None = None) -> str:
    """The prompt text: ChatML, tools in the system turn, tool calls as hermes writes them,
    and the generation prompt."""
    out = []
    if tools:
        out.append("<|im_start|>system\n# Tools\n" + "\n".join(
            json.dumps(t.get("function", t)) for t in tools) + END + "\n")
    for m in messages:
        out.append(f"<|im_start|>{m.get('role')}\n{_content(m)}{END}\n")
    return "".join(out) + "<|im_start|>assistant\n"


def _content(message: dict) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else "".join(
        p.get("text", "") for p in content or () if isinstance(p, dict))
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    calls = "".join(_call_text(c["function"]["name"], c["function"]["arguments"])
                    for c in message.get("tool_calls") or ())
    return (f"<think>{reasoning}</think>" if reasoning else "") + text + calls


def _call_text(name: str, arguments: str | dict) -> str:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


# --- what the model says ---------------------------------------------------------------


def _turn(mock: MockUpstream, request: dict) -> dict:
    script = mock.options.get("engine_script")
    if script:
        done = sum(1 for m in request.get("messages") or () if m.get("role") == "assistant")
        return script[min(done, len(script) - 1)]
    text, calls = _chat_answer(mock, request)
    return {"text": "" if calls else text,
            "tool_calls": [{"name": c["name"], "arguments": json.loads(c["arguments"])}
                           for c in calls]}


class _Sampled:
    """One completion as tokens: (piece, what the delta says) in order."""

    def __init__(self, turn: dict, ident: str) -> None:
        self.steps: list[tuple[str, dict]] = []
        if turn.get("reasoning"):
            self._say("<think>", {})
            for p in pieces(turn["reasoning"]):
                self._say(p, {"reasoning": p})
            self._say("</think>", {})
        for p in pieces(turn.get("text") or ""):
            self._say(p, {"content": p})
        self.calls = []
        for i, call in enumerate(turn.get("tool_calls") or ()):
            self._call(i, call, f"chatcmpl-tool-{ident}{i}")
        self._say(END, {})
        self.finish = turn.get("finish") or ("tool_calls" if self.calls else "stop")

    def _say(self, piece: str, delta: dict) -> None:
        self.steps.append((piece, delta))

    def _call(self, index: int, call: dict, call_id: str) -> None:
        args = json.dumps(call.get("arguments") or {})
        self.calls.append({"id": call_id, "type": "function",
                           "function": {"name": call["name"], "arguments": args}})
        head = pieces(f'<tool_call>{{"name": "{call["name"]}", "arguments": ')
        for p in head[:-1]:  # the parser buffers until it has the name
            self._say(p, {})
        self._say(head[-1], {"content": None, "tool_calls": [
            {"id": call_id, "type": "function", "index": index,
             "function": {"name": call["name"]}}]})
        for p in pieces(args):
            self._say(p, {"content": None, "tool_calls": [
                {"index": index, "function": {"arguments": p}}]})
        self._say("}", {})
        self._say("</tool_call>", {})

    @property
    def text(self) -> str:
        return "".join(d.get("content") or "" for _, d in self.steps)

    @property
    def reasoning(self) -> str | None:
        return "".join(d.get("reasoning", "") for _, d in self.steps) or None


def _logprob(piece: str, top: int) -> dict:
    lp = -round((zlib.crc32(piece.encode()) % 1000) / 500, 6)
    entry = {"token": piece, "logprob": lp, "bytes": list(piece.encode())}
    alternatives = [{"token": piece, "logprob": lp, "bytes": list(piece.encode())}]
    for k in range(1, top):
        alt = f"alt{k}"
        alternatives.append({"token": alt, "logprob": lp - k, "bytes": list(alt.encode())})
    return {**entry, "top_logprobs": alternatives}


# --- the route ---------------------------------------------------------------------------


def _chat(mock: MockUpstream, received: Received) -> Reply:
    request = received.json()
    messages = request.get("messages") or []
    prompt = tokenize(render(messages, request.get("tools")))
    ident = hashlib.sha256(received.body).hexdigest()[:16]
    sampled = _Sampled(_turn(mock, request), ident)
    limit = request.get("max_tokens") or request.get("max_completion_tokens")
    if isinstance(limit, int) and limit < len(sampled.steps):
        sampled.steps, sampled.finish = sampled.steps[:limit], "length"
    asked = _Asked(request)
    usage = {"prompt_tokens": len(prompt), "total_tokens": len(prompt) + len(sampled.steps),
             "completion_tokens": len(sampled.steps), "prompt_tokens_details": None}
    top = {"id": f"chatcmpl-{ident}", "created": CREATED, "model": request.get("model")}
    if request.get("stream"):
        return Reply.stream(_stream(top, prompt, sampled, asked, usage, request))
    return Reply.json(_whole(top, prompt, sampled, asked, usage))


class _Asked:
    def __init__(self, request: dict) -> None:
        self.ids = request.get("return_token_ids") is True
        self.logprobs = request.get("logprobs") is True
        self.top = request.get("top_logprobs") or 0 if self.logprobs else 0


def _whole(top: dict, prompt: list[int], sampled: _Sampled, asked: _Asked,
           usage: dict) -> dict:
    message = {"role": "assistant", "content": sampled.text or None, "refusal": None,
               "annotations": None, "audio": None, "function_call": None,
               "tool_calls": sampled.calls, "reasoning": sampled.reasoning}
    logprobs = ({"content": [_logprob(p, asked.top) for p, _ in sampled.steps]}
                if asked.logprobs else None)
    choice = {"index": 0, "message": message, "logprobs": logprobs,
              "finish_reason": sampled.finish, "stop_reason": None,
              "token_ids": [token_id(p) for p, _ in sampled.steps] if asked.ids else None}
    return {**top, "object": "chat.completion", "choices": [choice], "service_tier": None,
            "system_fingerprint": FINGERPRINT, "usage": usage, "prompt_logprobs": None,
            "prompt_token_ids": prompt if asked.ids else None, "prompt_text": None,
            "kv_transfer_params": None}


def _stream(top: dict, prompt: list[int], sampled: _Sampled, asked: _Asked, usage: dict,
            request: dict) -> Iterator[bytes]:
    top = {"id": top["id"], "object": "chat.completion.chunk", "created": top["created"],
           "model": top["model"]}
    yield _data({**top, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "logprobs": None, "finish_reason": None}],
                 "prompt_token_ids": prompt if asked.ids else None, "prompt_text": None})
    last = len(sampled.steps) - 1
    for i, (piece, delta) in enumerate(sampled.steps):
        if not (delta or asked.ids or asked.logprobs or i == last):
            continue  # vLLM sends an empty delta only to carry ids or logprobs
        choice: dict[str, Any] = {
            "index": 0, "delta": delta,
            "logprobs": {"content": [_logprob(piece, asked.top)]} if asked.logprobs else None,
            "finish_reason": sampled.finish if i == last else None}
        if i == last:
            choice["stop_reason"] = None
        choice["token_ids"] = [token_id(piece)] if asked.ids else None
        extra = {"system_fingerprint": FINGERPRINT} if i == last else {}
        yield _data({**top, "choices": [choice], **extra})
    if (request.get("stream_options") or {}).get("include_usage"):
        yield _data({**top, "choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"


def _data(chunk: dict) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _tokenize(mock: MockUpstream, received: Received) -> Reply:
    """vLLM's `POST /tokenize`: `{"messages", "add_generation_prompt"}` or `{"prompt"}`."""
    request = received.json()
    text = (render(request["messages"], request.get("tools")) if "messages" in request
            else request.get("prompt", ""))
    tokens = tokenize(text)
    return Reply.json({"count": len(tokens), "max_model_len": 8192, "tokens": tokens,
                       "token_strs": None})


def _models(mock: MockUpstream, received: Received) -> Reply:
    name = mock.options.get("engine_model", "mock-engine")
    return Reply.json({"object": "list", "data": [{"id": name, "object": "model",
                                                   "owned_by": "vllm"}]})


ROUTES = [
    ("POST", lambda path: path.endswith("/v1/chat/completions"), _chat),
    ("POST", lambda path: path == "/tokenize", _tokenize),
    ("GET", lambda path: path == "/v1/models", _models),
]
