"""The Anthropic translator: requests into Chat Completions, and engine streams (captured from
a real vLLM, and made by the mock engine) back into Anthropic events, under every chunking,
read by the anthropic SDK's own stream accumulator."""

from __future__ import annotations

import anthropic
import orjson
import pytest
from conftest import chunkings, sse_http_client
from vllm_data import body

from forge_record.bridge import TRANSLATORS, Untranslatable
from forge_record.bridge.anthropic import AnthropicTranslator
from forge_record.bridge.base import ChatStream
from forge_record.bridge.call import BridgedCall, HttpBridge
from forge_record.mock import Received
from forge_record.mock import engine as mock_engine

ASK = {"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": True,
       "messages": [{"role": "user", "content": "List the files here."}]}
BASH = {"name": "Bash", "description": "Run a command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}


def chat(request: dict, model: str | None = "tiny") -> dict:
    return AnthropicTranslator(request, path="/v1/messages", model=model).chat_request()


def bridged(request: dict, chunks: list[bytes], content_type="text/event-stream") -> bytes:
    """The agent's bytes for the engine's answer cut into `chunks`."""
    call = BridgedCall.open(AnthropicTranslator, orjson.dumps(request), path="/v1/messages",
                            model="tiny")
    http = HttpBridge(call, "/v1/messages")
    http.start(200, "", content_type)
    return b"".join(http.feed(c) for c in chunks) + http.flush()


def sdk_final(agent: bytes) -> anthropic.types.Message:
    """The anthropic SDK's accumulated message for our bytes."""
    client = anthropic.Anthropic(api_key="sk-ant-dummy", http_client=sse_http_client(agent),
                                 max_retries=0)
    with client.messages.stream(model=ASK["model"], max_tokens=64,
                                messages=ASK["messages"]) as stream:
        return stream.get_final_message()


def engine_chunks(sse: bytes) -> list[dict]:
    stream = ChatStream()
    return stream.feed(sse) + stream.flush()


def mock_stream(turn: dict, request: dict | None = None) -> bytes:
    """The mock engine's vLLM-faithful stream for a scripted turn, asked as the bridge asks."""
    call = BridgedCall.open(AnthropicTranslator, orjson.dumps(request or ASK),
                            path="/v1/messages", model="tiny")

    class Mock:
        options = {"engine_script": [turn]}

    reply = mock_engine._chat(Mock(), Received("POST", "/v1/chat/completions", {},
                                               call.request_body))
    return b"".join(reply.body)


# --- the request ---------------------------------------------------------------------------


def test_registry_names_the_translator():
    assert TRANSLATORS["anthropic.messages"] is AnthropicTranslator


def test_system_blocks_tools_and_sampling_carry_over():
    request = {**ASK, "system": [{"type": "text", "text": "You are Claude Code.",
                                  "cache_control": {"type": "ephemeral"}},
                                 {"type": "text", "text": "Be brief."}],
               "tools": [BASH], "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
               "temperature": 0.5, "top_p": 0.9, "stop_sequences": ["END"],
               "metadata": {"user_id": "u"}, "thinking": {"type": "enabled", "budget_tokens": 9}}
    out = chat(request)
    assert out["model"] == "tiny"
    assert out["messages"][0] == {"role": "system", "content": "You are Claude Code.\nBe brief."}
    assert out["tools"] == [{"type": "function", "function": {
        "name": "Bash", "description": "Run a command", "parameters": BASH["input_schema"]}}]
    assert out["tool_choice"] == "required" and out["parallel_tool_calls"] is False
    assert (out["max_tokens"], out["temperature"], out["top_p"], out["stop"]) == (
        64, 0.5, 0.9, ["END"])
    assert "metadata" not in out and "thinking" not in out


def test_claude_code_s_hints_are_dropped_and_an_output_schema_kept():
    schema = {"type": "object", "properties": {"title": {"type": "string"}}}
    out = chat({**ASK, "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
                "thinking": {"type": "adaptive"},
                "output_config": {"effort": "high", "format": {"type": "json_schema",
                                                                "schema": schema}}})
    assert out["response_format"] == {"type": "json_schema",
                                      "json_schema": {"name": "output", "schema": schema}}
    assert set(out) == {"model", "messages", "max_tokens", "stream", "response_format"}


def test_a_tool_round_trip_becomes_tool_calls_and_tool_messages():
    messages = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should run it.", "signature": ""},
            {"type": "text", "text": "Running."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
             "content": [{"type": "text", "text": "no such file"}]},
            {"type": "text", "text": "try again", "cache_control": {"type": "ephemeral"}}]},
        {"role": "system", "content": [{"type": "text", "text": "Tools changed."}]},
    ]
    out = chat({**ASK, "messages": messages})["messages"]
    assert out[4] == {"role": "system", "content": "Tools changed."}
    assert out[1] == {"role": "assistant", "content": "Running.", "reasoning": "I should run it.",
                      "tool_calls": [{"id": "toolu_1", "type": "function", "function": {
                          "name": "Bash", "arguments": '{"command": "ls"}'}}]}
    assert out[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: no such file"}
    assert out[3] == {"role": "user", "content": "try again"}


def test_an_image_in_a_tool_result_moves_to_the_user_message_after_it():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBO"}}
    messages = [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "x"},
                                                                 image]}]}]
    out = chat({**ASK, "messages": messages})["messages"]
    assert out == [{"role": "tool", "tool_call_id": "t", "content": "x"},
                   {"role": "user", "content": [{"type": "image_url", "image_url": {
                       "url": "data:image/png;base64,iVBO"}}]}]


@pytest.mark.parametrize("request_", [
    {**ASK, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
    {**ASK, "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
    {**ASK, "mcp_servers": [{"type": "url", "url": "https://x"}]},
    {**ASK, "messages": [{"role": "assistant", "content": [{"type": "server_tool_use"}]}]},
    {**ASK, "output_config": {"task_budget": 3}},
], ids=["server-tool", "document", "mcp", "server-tool-use", "output-config"])
def test_what_chat_cannot_say_is_untranslatable(request_):
    with pytest.raises(Untranslatable):
        chat(request_)


def test_an_untranslatable_call_is_refused_in_anthropic_s_shape():
    call = BridgedCall.open(AnthropicTranslator, orjson.dumps(
        {**ASK, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
        path="/v1/messages", model=None)
    assert "web_search" in call.refused
    assert call.translator.error(400, call.refused)["error"]["type"] == "invalid_request_error"


def test_the_bridge_asks_the_engine_for_tokens_and_usage():
    call = BridgedCall.open(AnthropicTranslator, orjson.dumps(ASK), path="/v1/messages",
                            model="tiny", top_logprobs=2)
    sent = orjson.loads(call.request_body)
    assert sent["return_token_ids"] is True and sent["logprobs"] is True
    assert sent["top_logprobs"] == 2 and sent["stream_options"] == {"include_usage": True}


# --- the answer, under every chunking ------------------------------------------------------


def check_every_chunking(request: dict, sse: bytes) -> bytes:
    whole = bridged(request, [sse])
    for label, chunks in chunkings(sse, max_cuts=40):
        assert bridged(request, chunks) == whole, label
    return whole


@pytest.mark.parametrize("name", ["chat_stream_text", "chat_stream_tool", "pair_stream_asked",
                                  "pair_stream_tool_asked"])
def test_captured_vllm_streams_fold_into_the_sdk_s_message(name):
    sse = body(name)
    agent = check_every_chunking(ASK, sse)
    chunks = engine_chunks(sse)
    message = sdk_final(agent)
    said = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks
                   if c.get("choices"))
    texts = "".join(b.text for b in message.content if b.type == "text")
    assert texts == said
    assert message.usage.input_tokens == len(chunks[0]["prompt_token_ids"])
    finish = chunks[-1]["choices"][0]["finish_reason"]
    tools = [b for b in message.content if b.type == "tool_use"]
    if tools:
        assert message.stop_reason == "tool_use"
        assert tools[0].name == "run_shell" and tools[0].id.startswith("chatcmpl-tool-")
    else:
        assert message.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[finish]


@pytest.mark.parametrize("turn", [
    {"text": "Hello there, from the engine."},
    {"reasoning": "Let me think.", "text": "Done."},
    {"text": "I'll look.", "tool_calls": [{"name": "Bash", "arguments": {"command": "ls -la"}}]},
    {"tool_calls": [{"name": "Bash", "arguments": {"command": "ls"}},
                    {"name": "Bash", "arguments": {"command": "pwd"}}]},
], ids=["text", "thinking", "text-and-tool", "two-tools"])
def test_mock_engine_streams_fold_into_the_sdk_s_message(turn):
    request = {**ASK, "tools": [BASH]}
    sse = mock_stream(turn, request)
    agent = check_every_chunking(request, sse)
    message = sdk_final(agent)
    kinds = [b.type for b in message.content]
    expected = (["thinking"] if turn.get("reasoning") else []) + (
        ["text"] if turn.get("text") else []) + ["tool_use"] * len(turn.get("tool_calls", []))
    assert kinds == expected
    if turn.get("reasoning"):
        assert message.content[0].thinking == turn["reasoning"]
        assert message.content[0].signature == ""
    if turn.get("text"):
        assert next(b for b in message.content if b.type == "text").text == turn["text"]
    calls = [b for b in message.content if b.type == "tool_use"]
    assert [c.input for c in calls] == [c["arguments"] for c in turn.get("tool_calls", [])]
    assert len({c.id for c in calls}) == len(calls)
    assert message.stop_reason == ("tool_use" if calls else "end_turn")
    usage = engine_chunks(sse)[-1]["usage"]
    assert message.usage.input_tokens == usage["prompt_tokens"]
    assert message.usage.output_tokens == usage["completion_tokens"]


def test_a_stop_sequence_is_named():
    request = {**ASK, "stop_sequences": ["END"]}
    sse = mock_stream({"text": "ok"}, request).replace(b'"stop_reason":null',
                                                       b'"stop_reason":"END"')
    message = sdk_final(bridged(request, [sse]))
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "END")


def test_an_error_chunk_mid_stream_becomes_an_error_event():
    sse = (b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
           b'\n\ndata: {"error":{"message":"engine died","code":500}}\n\n')
    agent = bridged(ASK, [sse])
    assert b'event: error\ndata: {"type":"error","error":{"type":"api_error",' in agent
    with pytest.raises(anthropic.APIStatusError, match="engine died"):
        sdk_final(agent)


# --- whole answers and errors --------------------------------------------------------------


@pytest.mark.parametrize("name", ["chat_json_text", "chat_json_tool"])
def test_a_whole_answer_is_a_message_the_sdk_reads(name):
    request = {**ASK, "stream": False}
    agent = bridged(request, [body(name)], "application/json")
    answer = orjson.loads(body(name))
    message = anthropic.types.Message.model_validate(orjson.loads(agent))
    assert message.content[0].text == answer["choices"][0]["message"]["content"]
    assert message.usage.input_tokens == answer["usage"]["prompt_tokens"]
    assert message.usage.output_tokens == answer["usage"]["completion_tokens"]
    assert message.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[
        answer["choices"][0]["finish_reason"]]


def test_an_engine_error_keeps_its_status_in_anthropic_s_shape():
    call = BridgedCall.open(AnthropicTranslator, orjson.dumps(ASK), path="/v1/messages",
                            model="tiny")
    http = HttpBridge(call, "/v1/messages")
    assert http.start(400, "", "application/json") == "application/json"
    out = http.feed(b'{"error":{"message":"max_tokens is too large","type":"BadRequestError",'
                    b'"code":400}}') + http.flush()
    assert orjson.loads(out) == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "max_tokens is too large"}}
