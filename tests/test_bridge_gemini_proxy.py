"""The Gemini bridge through the live proxy: google-genai talks Gemini to a recording proxy in
front of the mock engine (Chat Completions only, vLLM's fields), does a function-call round
trip, streamed and whole, counts tokens, and meets an engine error and a server tool; the
record keeps both sides of each call with the engine's tokens on the agent's."""

from __future__ import annotations

import orjson
import pytest
from engine_mock import bridging_proxy, prepared, scripted_engine
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from forge_record.bridge.pairs import link_of
from forge_record.mock import engine as mock_engine
from forge_record.records import COMPLETE, ERROR

HOST = "generativelanguage.googleapis.com"
MODEL = "gemini-2.5-flash"
SHELL = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="run_shell_command", description="Run a command",
    parameters=types.Schema(type="OBJECT", properties={"command": types.Schema(type="STRING")},
                            required=["command"]))])
SCRIPT = [{"text": "Let me look.", "tool_calls": [{"name": "run_shell_command",
                                                   "arguments": {"command": "ls"}}]},
          {"text": "There is a README."}]
CONFIG = types.GenerateContentConfig(tools=[SHELL], system_instruction="You are Gemini CLI.",
                                     temperature=1.0, max_output_tokens=200)
ASK = [types.Content(role="user", parts=[types.Part(text="What is here?")])]


@pytest.fixture
def engine():
    with scripted_engine(SCRIPT) as m:
        yield m


@pytest.fixture
def bridged(engine, tmp_path):
    """(client, exchanges, recorder): google-genai against a proxy bridging to the engine."""
    with bridging_proxy(HOST, engine.url, tmp_path, top_logprobs=2) as (port, exchanges, addon):
        client = genai.Client(api_key="AIza-dummy-key", http_options=types.HttpOptions(
            base_url=f"http://127.0.0.1:{port}",
            retry_options=types.HttpRetryOptions(attempts=1)))
        yield client, exchanges, addon


def answer(client, contents: list, stream: bool) -> types.GenerateContentResponse:
    """The model's turn as the agent folds it (a stream's parts joined in one response)."""
    if not stream:
        return client.models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    chunks = list(client.models.generate_content_stream(model=MODEL, contents=contents,
                                                        config=CONFIG))
    parts = [p for c in chunks for p in c.candidates[0].content.parts or ()]
    last = chunks[-1]
    last.candidates[0].content.parts = parts
    return last


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_function_call_round_trip_is_recorded_with_the_engine_s_tokens(bridged, engine,
                                                                         stream):
    client, exchanges, _ = bridged
    first = answer(client, ASK, stream)
    [call] = first.function_calls
    assert (call.id, call.name, call.args) == (None, "run_shell_command", {"command": "ls"})
    assert first.text == "Let me look." and first.candidates[0].finish_reason == "STOP"
    history = [*ASK, first.candidates[0].content, types.Content(role="user", parts=[
        types.Part(function_response=types.FunctionResponse(
            name="run_shell_command", response={"output": "README.md"}))])]
    second = answer(client, history, stream)
    assert second.text == "There is a README."
    usage = second.usage_metadata
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count

    sent = [orjson.loads(r.body) for r in engine.requests]
    assert [r.path for r in engine.requests] == ["/v1/chat/completions"] * 2
    assert sent[0]["tools"][0]["function"]["parameters"]["type"] == "object"
    follow = sent[1]["messages"]
    assert follow[2]["tool_calls"][0]["id"] == follow[3]["tool_call_id"] == "call_1_0"
    assert follow[3]["content"] == '{"output":"README.md"}'

    records = prepared(exchanges.wait(4))
    agent_side = [r for r in records if r.kind == "model"]
    engine_side = [r for r in records if r.kind == "engine"]
    assert len(agent_side) == len(engine_side) == 2
    for agent, request in zip(agent_side, sent, strict=True):
        [pair] = [e for e in engine_side if link_of(e) == link_of(agent)]
        assert agent.status == pair.status == COMPLETE, (agent.flags, pair.flags)
        assert agent.dialect == "gemini.generate" and "bridged" in agent.flags
        assert agent.request.stream is stream and agent.request.model == MODEL
        tokens = agent.response.tokens
        assert tokens == pair.response.tokens
        assert tokens.prompt_ids == mock_engine.tokenize(mock_engine.render(
            request["messages"], request["tools"]))
        assert len(tokens.ids) == len(tokens.logprobs) and tokens.ids
    # the agent's record holds what google-genai read: Gemini chunks, not the engine's
    raw = agent_side[0].raw_response
    assert raw.startswith(b'data: {"candidates"') if stream else raw.startswith(b'{"candidates"')
    [recorded_call] = [b for b in agent_side[0].response.content if b.type == "tool_call"]
    assert recorded_call.name == "run_shell_command"
    assert agent_side[1].request.messages[-1].content[0].tool_call_id == recorded_call.id


def test_count_tokens_is_the_engine_s_count_of_the_rendered_prompt(bridged, engine):
    client, exchanges, _ = bridged
    counted = client.models.count_tokens(model=MODEL, contents=ASK)
    [sent] = engine.requests
    assert sent.path == "/tokenize"
    assert counted.total_tokens == len(mock_engine.tokenize(mock_engine.render(
        orjson.loads(sent.body)["messages"])))
    [record] = prepared(exchanges.wait(1))
    assert record.kind == "side" and record.status == COMPLETE, record.flags


def test_a_server_tool_is_refused_in_gemini_s_words(bridged, engine):
    client, exchanges, addon = bridged
    search = types.GenerateContentConfig(tools=[types.Tool(google_search=types.GoogleSearch())])
    with pytest.raises(genai_errors.ClientError, match="googleSearch") as caught:
        list(client.models.generate_content_stream(model=MODEL, contents=ASK, config=search))
    assert caught.value.code == 400 and caught.value.status == "INVALID_ARGUMENT"
    [record] = prepared(exchanges.wait(1))
    assert addon.untranslatable == 1 and "untranslatable" in record.flags
    assert record.status == ERROR and not engine.requests


def test_an_engine_error_reaches_the_agent_as_a_gemini_error(bridged, engine):
    client, exchanges, _ = bridged
    engine.routes.insert(0, ("POST", lambda p: True, lambda m, r: mock_engine.Reply.json(
        {"error": {"message": "maximum context length is 2048 tokens", "type": "BadRequestError",
                   "code": 400}}, 400)))
    with pytest.raises(genai_errors.ClientError, match="maximum context length") as caught:
        list(client.models.generate_content_stream(model=MODEL, contents=ASK, config=CONFIG))
    assert caught.value.code == 400 and caught.value.status == "INVALID_ARGUMENT"
    records = prepared(exchanges.wait(2))
    assert {r.status for r in records} == {ERROR}
