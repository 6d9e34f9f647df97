"""A real vLLM behind the recording proxy with `engine="vllm"`, driven by the official openai
SDK: the record holds the engine's own tokens (the prompt ids equal the engine's /tokenize
of the same messages), and the agent gets exactly the answer it would have had without them.
"""

from __future__ import annotations

import json
import re

import openai
import pytest
from engine_mock import arrived, post, recording_proxy

from forge_record.records import COMPLETE, ToolCall

pytestmark = [pytest.mark.slow, pytest.mark.engine]

MESSAGES = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "List the files here."}]
TOOLS = [{"type": "function", "function": {
    "name": "run_shell", "description": "Run a shell command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}]
_PER_CALL = re.compile(rb'"(id|created)":("[^"]*"|\d+)')


@pytest.fixture
def recorded(vllm_url, tmp_path):  # noqa: F811
    with recording_proxy(vllm_url, tmp_path, "vllm", top_logprobs=2) as (url, exchanges):
        yield f"{url}/v1", exchanges


def answer(body: bytes, stream: bool) -> bytes | list:
    """What the agent got, without what differs per call (ids, times). A stream as its
    events with the text deltas joined: how vLLM cuts the same text into chunks depends on
    its timing (two calls a moment apart: "com", " itself" against "com itself"), and the
    proxy passes each call's bytes as they come (tests/test_recorder_hooks.py)."""
    if not stream:
        return _PER_CALL.sub(b"", body)
    events, text = [], ""
    for line in body.split(b"\n\n"):
        data = line.removeprefix(b"data: ")
        chunk = json.loads(data) if data.startswith(b"{") else data
        if isinstance(chunk, dict):
            chunk.pop("id", None), chunk.pop("created", None)
        choice = chunk["choices"][0] if isinstance(chunk, dict) and chunk.get("choices") else {}
        text += choice.get("delta", {}).pop("content", None) or ""
        if choice and not choice["delta"] and not choice.get("finish_reason"):
            continue  # text only: joined with the next
        events += [text, chunk] if text else [chunk]
        text = ""
    return events + ([text] if text else [])


def tokenize(vllm: str, **render) -> list[int]:
    body = {"model": "tiny", "add_generation_prompt": True, **render}
    return json.loads(post(f"{vllm}/tokenize", body))["tokens"]


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-dummy-key", base_url=base_url, max_retries=0, timeout=300)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_the_agent_gets_what_a_direct_call_gets(recorded, vllm_url, stream):  # noqa: F811
    base, exchanges = recorded
    call = {"model": "tiny", "messages": MESSAGES, "tools": TOOLS, "stream": stream,
            "max_tokens": 16, "temperature": 1.0, "seed": 11}
    through = post(f"{base}/chat/completions", call)
    direct = post(f"{vllm_url}/v1/chat/completions", call)
    assert answer(through, stream) == answer(direct, stream)
    [ex] = arrived(exchanges)
    assert ex.status == COMPLETE, ex.flags
    assert ex.response.tokens.prompt_ids == tokenize(vllm_url, messages=MESSAGES, tools=TOOLS)
    assert len(ex.response.tokens.ids) == len(ex.response.tokens.logprobs) > 0
    assert all(len(top) == 2 for top in ex.response.tokens.top_logprobs)
    assert b'"return_token_ids":true' in ex.raw_request  # what the engine was asked
    assert b"token_ids" not in direct or b'"token_ids":null' in through


def test_sdk_tool_call_round_trip_is_recorded_token_exactly(recorded, vllm_url):  # noqa: F811
    base, exchanges = recorded
    sdk = client(base)
    first = sdk.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS,
                                        tool_choice="required", max_tokens=24, seed=3)
    assert first.choices[0].model_extra.get("token_ids") is None  # not asked, not seen
    assert first.model_extra.get("prompt_token_ids") is None
    history = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "run_shell", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "README.md"}]
    chunks = list(sdk.chat.completions.create(model="tiny", messages=history, tools=TOOLS,
                                              max_tokens=8, seed=3, stream=True))
    assert all(c.choices[0].model_extra.get("token_ids") is None for c in chunks if c.choices)
    one, two = arrived(exchanges, 2)
    assert one.response.tokens.prompt_ids == tokenize(vllm_url, messages=MESSAGES, tools=TOOLS)
    assert two.response.tokens.prompt_ids == tokenize(vllm_url, messages=history, tools=TOOLS)
    assert len(one.response.tokens.ids) == first.usage.completion_tokens
    calls = [b for b in one.response.content if isinstance(b, ToolCall)]
    seen = first.choices[0].message.tool_calls or []
    assert [c.name for c in calls] == [c.function.name for c in seen]
