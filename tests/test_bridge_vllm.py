"""The bridge against a real vLLM: the anthropic SDK speaks Anthropic Messages to a recording
proxy whose upstream is vLLM's Chat Completions. The SDK's own accumulator reads what the
bridge made of vLLM's stream, and the recorded prompt ids are the engine's `/tokenize` of the
messages it was sent."""

from __future__ import annotations

import json
import urllib.request

import anthropic
import orjson
import pytest
from support import Arrivals

from forge_record.addons.proxy import InProcessProxy
from forge_record.addons.recorder import Recorder
from forge_record.bridge.pairs import Pairs
from forge_record.finalize import finalize
from forge_record.records import COMPLETE
from forge_record.trust import confdir

pytestmark = [pytest.mark.slow, pytest.mark.engine]

SYSTEM = [{"type": "text", "text": "You are a coding agent.",
           "cache_control": {"type": "ephemeral"}}]
ASK = [{"role": "user", "content": "List the files here."}]
BASH = {"name": "run_shell", "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                         "required": ["command"]}}


@pytest.fixture
def bridged(vllm_url, tmp_path):  # noqa: F811
    exchanges = Arrivals()
    addon = Recorder(exchanges.append, record_any_host=True, engine="vllm", engine_model="tiny",
                     top_logprobs=2)
    proxy = InProcessProxy(addon, mode=f"reverse:{vllm_url}", confdir=confdir(tmp_path))
    port = proxy.start()
    client = anthropic.Anthropic(api_key="sk-ant-dummy-key", base_url=f"http://127.0.0.1:{port}",
                                 max_retries=0, timeout=300)
    try:
        yield client, exchanges
    finally:
        client.close()
        proxy.stop()


def tokenize(vllm: str, chat: dict) -> list[int]:
    body = {"model": "tiny", "add_generation_prompt": True, "messages": chat["messages"]}
    if chat.get("tools"):
        body["tools"] = chat["tools"]
    request = urllib.request.Request(f"{vllm}/tokenize", json.dumps(body).encode(),
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as answer:
        return json.loads(answer.read())["tokens"]


def records(exchanges: Arrivals) -> tuple:
    pairs = Pairs()
    done = [pairs.join(finalize(e)) for e in exchanges.wait(2)]
    [agent] = [e for e in done if e.kind == "model"]
    [engine] = [e for e in done if e.kind == "engine"]
    return agent, engine


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("tools", [False, True], ids=["text", "tool"])
def test_the_sdk_reads_vllm_through_the_bridge(bridged, vllm_url, stream, tools):  # noqa: F811
    client, exchanges = bridged
    call = {"model": "claude-sonnet-4-5", "max_tokens": 24, "system": SYSTEM, "messages": ASK}
    if tools:  # "any" is vLLM's "required": a call of the tool, guided by its schema
        call |= {"tools": [BASH], "tool_choice": {"type": "any"}}
    if stream:
        with client.messages.stream(**call) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**call)
    agent, engine = records(exchanges)
    assert agent.status == engine.status == COMPLETE, (agent.flags, engine.flags)
    sent = orjson.loads(engine.raw_request)
    tokens = agent.response.tokens
    assert tokens.prompt_ids == tokenize(vllm_url, sent)
    assert len(tokens.ids) == len(tokens.logprobs) == len(tokens.top_logprobs) > 0
    assert message.usage.input_tokens == len(tokens.prompt_ids)
    assert message.usage.output_tokens == len(tokens.ids)
    # The random model's text (and, cut at max_tokens, its tool-call JSON) is noise: what
    # must hold is that the agent got the engine's answer, translated.
    said = engine.response
    texts = "".join(b.text for b in message.content if b.type == "text")
    assert texts == "".join(b.text for b in said.content if b.type == "text")
    calls = [(b.id, b.name) for b in message.content if b.type == "tool_use"]
    assert calls == [(b.id, b.name) for b in said.content if b.type == "tool_call"]
    finish = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
    assert message.stop_reason == ("tool_use" if calls else finish[said.stop_reason])
    assert agent.response.stop_reason == message.stop_reason


def test_count_tokens_is_vllm_s_own_count(bridged, vllm_url):  # noqa: F811
    client, _ = bridged
    counted = client.messages.count_tokens(model="claude-sonnet-4-5", system=SYSTEM,
                                           messages=ASK, tools=[BASH])
    chat = {"messages": [{"role": "system", "content": "You are a coding agent."}, *ASK],
            "tools": [{"type": "function", "function": {
                "name": "run_shell", "description": "Run a shell command",
                "parameters": BASH["input_schema"]}}]}
    assert counted.input_tokens == len(tokenize(vllm_url, chat))
