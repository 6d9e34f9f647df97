"""The OpenAI Chat Completions dialect: requests, JSON bodies and the SSE chunk fold.

Streams come from tests/data/sse/openai_chat/*.sse (OpenAI, DeepSeek, vLLM, Ollama-style).
Each is decoded under many chunkings and, when it ends with `[DONE]`, checked against the
official `openai` SDK: the completion its stream helper accumulates from the same bytes,
fed to our JSON decoder, must give the same Response as our streamed fold.
"""

from __future__ import annotations

import openai
import orjson
import pytest
from conftest import (
    assert_json_body_breaks_the_protocol,
    decode_chunks,
    decode_json_body,
    record_round_trip,
    sse_cases,
    sse_http_client,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_record.decoders.openai_chat import DIALECT
from forge_record.errors import DecodeError
from forge_record.records import Media, Message, Other, Reasoning, Text, Tool, ToolCall, ToolResult

CASES = sse_cases("openai_chat")
DONE_CASES = [name for name, body in CASES.items() if b"data: [DONE]" in body]
SSE = "text/event-stream; charset=utf-8"


def decode_stream(chunks: list[bytes]):
    return decode_chunks(DIALECT, SSE, chunks)


def decode_body(body: bytes):
    return decode_json_body(DIALECT, body)


def stream(name: str):
    return decode_stream([CASES[name]])[0]


# --- the record round trip (chunking, framing and garbage: test_decoder_contract.py) ------


@pytest.mark.parametrize("name", CASES)
def test_response_survives_the_record_round_trip(name):
    response = stream(name)
    assert record_round_trip(response) == response


# --- streamed and whole-body paths agree with the official SDK ------------------------------


def sdk_final_completion(body: bytes) -> bytes:
    client = openai.OpenAI(api_key="sk-dummy-key", base_url="http://test/v1", max_retries=0,
                           http_client=sse_http_client(body))
    with client.chat.completions.stream(
        model="gpt-4.1",  # what is asked does not matter; the transport answers
        messages=[{"role": "user", "content": "hi"}],
    ) as events:
        completion = events.get_final_completion()
    # exclude_unset keeps what the wire carried, as a non-streaming body would
    return completion.model_dump_json(exclude_unset=True).encode()


@pytest.mark.parametrize("name", DONE_CASES)
def test_stream_equals_sdk_final_completion_as_body(name):
    streamed, complete = decode_stream([CASES[name]])
    from_body, body_complete = decode_body(sdk_final_completion(CASES[name]))
    assert complete and body_complete
    assert streamed == from_body


def test_sdk_comparison_can_fail():
    """The SDK check is not vacuous: a changed byte in the stream changes our record."""
    body = CASES["parallel_tool_calls"]
    tampered = body.replace(b'"name":"grep"', b'"name":"grip"')
    assert decode_stream([tampered])[0] != decode_body(sdk_final_completion(body))[0]


# --- what each stream means --------------------------------------------------------------


def test_text_and_usage_only_final_chunk():
    response, complete = decode_stream([CASES["text_usage_chunk"]])
    assert complete
    assert response.id == "chatcmpl-CHx4GmVJ1yQ7oJr2eYxk3Lz0aB1cD"
    assert response.content == [Text(text="The failing test expects `parse_config` to return a "
                                      "dict; it now returns a `Config` object. Héllo — ✓")]
    assert response.stop_reason == "stop"
    # input_tokens excludes cached tokens, as records.Usage says
    usage = response.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (182, 1280, 24)
    assert usage.reasoning_tokens == 0 and usage.raw["prompt_tokens"] == 1462
    assert response.extras == {"created": 1764489211, "service_tier": "default",
                               "system_fingerprint": "fp_3f58d112f7"}  # no obfuscation


def test_parallel_tool_calls_interleaved_by_index():
    response = stream("parallel_tool_calls")
    read, grep = response.content
    assert read == ToolCall(id="call_Xk3pR8vWq1LmN0bT5yZa2Cde", name="read_file",
                            arguments={"path": "src/config.py", "start_line": 1},
                            arguments_raw='{"path": "src/config.py", "start_line": 1}')
    assert grep.id == "call_Pq7sW2eR4tY6uI8oA0sDf1Gh" and grep.name == "grep"
    assert grep.arguments == {"pattern": "parse_config\\(", "glob": "**/*.py", "max_results": 20}
    assert response.stop_reason == "tool_calls"
    assert (response.usage.input_tokens, response.usage.cache_read_tokens) == (290, 1920)


def test_a_chunk_can_carry_fragments_of_two_calls():
    both = [line for line in CASES["parallel_tool_calls"].split(b"\n\n")
            if b'"index":1,"function"' in line and b'"index":0,"function"' in line]
    assert both  # the fixture exercises it


def test_legacy_function_call():
    response = stream("legacy_function_call")
    assert response.content == [ToolCall(
        id="", name="get_current_weather",
        arguments={"location": "Boston, MA", "unit": "celsius"},
        arguments_raw='{\n  "location": "Boston, MA",\n  "unit": "celsius"\n}')]
    assert response.stop_reason == "function_call"
    assert response.usage.raw is None


def test_refusal_is_other_and_its_logprobs_are_kept():
    response = stream("refusal_logprobs")
    assert response.content == [Other(data={"type": "refusal",
                                            "refusal": "I'm sorry, I can't help with that."})]
    tokens = [e["token"] for e in response.extras["logprobs"]["refusal"]]
    assert "".join(tokens) == "I'm sorry, I can't help with that."
    assert "content" not in response.extras["logprobs"]


def test_deepseek_reasoning_content_comes_first():
    response = stream("reasoning_content_deepseek")
    reasoning, text = response.content
    assert reasoning == Reasoning(text="The user asks which file defines parse_config. I should"
                                  " search for the definition first, then read it.")
    assert text == Text(text="Let me look for `parse_config` in the source tree.")
    assert response.usage.reasoning_tokens == 38
    assert response.usage.raw["prompt_cache_miss_tokens"] == 52


def test_vllm_reasoning_field_then_tool_call():
    reasoning, call = stream("reasoning_vllm_tool_call").content
    assert reasoning.text == "I need to list the directory before editing anything."
    assert call == ToolCall(id="chatcmpl-tool-5c2b9f0e7d1a4c3b8e6f", name="exec_command",
                            arguments={"cmd": "ls -la"}, arguments_raw='{"cmd": "ls -la"}')


def test_both_reasoning_fields_are_counted_once():
    response = stream("reasoning_both_fields")
    assert response.content == [Reasoning(text="Two plus two is four."), Text(text="4")]
    assert "message" not in response.extras


def test_content_logprobs_kept_in_extras():
    response = stream("logprobs")
    assert response.content == [Text(text="Yes.")]
    entries = response.extras["logprobs"]["content"]
    assert [e["token"] for e in entries] == ["Yes", "."]
    assert entries[0]["top_logprobs"][1] == {"token": "No", "logprob": -1.4, "bytes": [78, 111]}


def test_error_mid_stream_sets_error_and_stays_incomplete():
    response, complete = decode_stream([CASES["error_mid_stream"]])
    assert not complete
    assert response.error["type"] == "server_error"
    assert response.error["message"].startswith("The server had an error")
    assert response.content == [Text(text="Looking at the")]


def test_error_event_with_plain_text_data():
    response, complete = decode_stream([b'event: error\ndata: upstream timed out\n\n'])
    assert response.error == {"message": "upstream timed out"} and not complete


def test_other_choices_go_to_extras():
    response = stream("two_choices")
    assert response.content == [Text(text="Use pytest -x.")]
    assert response.extras["choices"] == [
        {"index": 1, "content": [{"type": "text", "text": "Try running tox"}],
         "finish_reason": "stop"}]


def test_usage_on_every_chunk_takes_the_last():
    usage = stream("usage_every_chunk").usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (30, 6, None)


def test_cut_inside_tool_call_keeps_partial_arguments():
    response, complete = decode_stream([CASES["cut_in_tool_call"]])
    assert not complete and response.stop_reason is None
    [call] = response.content
    assert call.parse_error and call.arguments is None
    assert call.arguments_raw == '{"path": "src/config.py", "old": "return Config('


def test_bad_chunks_are_kept_aside_and_the_rest_applies():
    body = (b'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
            b'data: {"choices":[{"index":"zero","delta":{"content":"!"}}]}\n\n'
            b'data: not json\n\n'
            b'data: {"choices":[{"index":0,"delta":{"content":" there"},'
            b'"finish_reason":"stop"}]}\n\n'
            b'data: [DONE]\n\n')
    response, complete = decode_stream([body])
    assert complete and response.content == [Text(text="Hi there")]
    assert [e["data"] for e in response.extras["undecoded_events"]][1] == "not json"


# --- hypothesis: random folds of this dialect's events never raise ------------------------


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["index", "delta", "content", "tool_calls", "function", "arguments",
                         "name", "id", "type", "logprobs", "finish_reason", "usage",
                         "reasoning", "custom", "input"]), inner, max_size=4),
    max_leaves=14)


delta_keys = st.sampled_from(["role", "content", "refusal", "reasoning_content", "reasoning",
                              "tool_calls", "function_call", "annotations", "obfuscation"])
tool_call_fragments = st.lists(st.fixed_dictionaries(
    {"index": st.integers(0, 2) | json_values},
    optional={"id": json_values, "type": st.sampled_from(["function", "custom"]) | json_values,
              "function": json_values, "custom": json_values}), max_size=3)
choices = st.lists(st.fixed_dictionaries(
    {"index": st.integers(0, 2) | json_values},
    optional={"delta": st.dictionaries(delta_keys, json_values | tool_call_fragments,
                                       max_size=4),
              "finish_reason": json_values, "logprobs": json_values}), max_size=3)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries({"choices": choices | json_values}, optional={
    "id": json_values, "model": json_values, "usage": json_values, "error": json_values}),
    max_size=6))
def test_random_chunks_never_raise(chunks):
    body = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    decode_stream([body])


# --- whole JSON bodies -------------------------------------------------------------------

COMPLETION = {
    "id": "chatcmpl-CHx5Aa1bB2cC3dD4eE5fF6gG7hH8i", "object": "chat.completion",
    "created": 1764489400, "model": "gpt-4.1-2025-04-14",
    "choices": [{"index": 0, "message": {
        "role": "assistant", "content": "Reading both files.", "refusal": None,
        "annotations": [],
        "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}},
            {"id": "call_b", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "b.py"'}},
        ]}, "logprobs": None, "finish_reason": "tool_calls"}],
    "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940,
              "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 512}},
    "service_tier": "default", "system_fingerprint": "fp_3f58d112f7",
}


def test_json_body_completion():
    response, complete = decode_body(orjson.dumps(COMPLETION))
    assert complete
    text, good, bad = response.content
    assert text == Text(text="Reading both files.")
    assert good == ToolCall(id="call_a", name="read_file", arguments={"path": "a.py"},
                            arguments_raw='{"path": "a.py"}')
    assert bad.parse_error and bad.arguments is None and bad.arguments_raw == '{"path": "b.py"'
    assert (response.usage.input_tokens, response.usage.cache_write_tokens) == (900, 512)
    assert response.extras == {"created": 1764489400, "service_tier": "default",
                               "system_fingerprint": "fp_3f58d112f7"}


def test_json_error_body():
    body = (b'{"error":{"message":"Rate limit reached for gpt-4.1","type":"requests",'
            b'"param":null,"code":"rate_limit_exceeded"}}')
    response, complete = decode_body(body)
    assert complete and response.error["code"] == "rate_limit_exceeded"
    assert response.content == [] and response.extras == {}


@pytest.mark.parametrize("body", [b"", b"<html>502 Bad Gateway</html>", b"[1, 2]",
                                  b'{"choices": 5}'])
def test_json_body_that_breaks_the_protocol_raises_decode_error(body):
    assert_json_body_breaks_the_protocol(DIALECT, body)


# --- requests ----------------------------------------------------------------------------

REQUEST = {
    "model": "gpt-4.1",
    "stream": True,
    "stream_options": {"include_usage": True},
    "temperature": 0.2,
    "tool_choice": "auto",
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "developer", "content": [{"type": "text", "text": "Prefer small diffs."}]},
        {"role": "user", "content": [
            {"type": "text", "text": "What does this show?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=",
                                                "detail": "low"}},
        ]},
        {"role": "assistant", "content": None, "reasoning_content": "Look first.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "README.md\nsrc"},
        {"role": "system", "content": "Mid-conversation note."},
    ],
    "tools": [
        {"type": "function", "function": {"name": "exec_command", "description": "Run it",
                                          "parameters": {"type": "object"}, "strict": True}},
        {"type": "custom", "custom": {"name": "apply_patch", "format": {"type": "text"}}},
    ],
    "functions": [{"name": "legacy_fn", "parameters": {"type": "object"}}],
}


def test_request_is_normalized():
    request = DIALECT.parse_request(orjson.dumps(REQUEST))
    assert request.model == "gpt-4.1" and request.stream
    assert request.system == [Text(text="You are a coding agent."),
                              Text(text="Prefer small diffs.")]
    user, assistant, tool, note = request.messages
    assert user.role == "user" and user.content[0] == Text(text="What does this show?")
    image = user.content[1]
    assert isinstance(image, Media) and image.media_type == "image/png" and image.size == 8
    assert assistant == Message(role="assistant", content=[
        Reasoning(text="Look first."),
        ToolCall(id="call_1", name="exec_command", arguments={"cmd": "ls"},
                 arguments_raw='{"cmd":"ls"}')])
    assert tool == Message(role="tool", content=[
        ToolResult(tool_call_id="call_1", content=[Text(text="README.md\nsrc")])])
    assert note == Message(role="system", content=[Text(text="Mid-conversation note.")])
    assert request.tools == [
        Tool(name="exec_command", description="Run it", parameters={"type": "object"}),
        Tool(name="apply_patch", parameters={"type": "text"}, kind="custom"),
        Tool(name="legacy_fn", parameters={"type": "object"}),
    ]
    assert request.parameters == {"stream_options": {"include_usage": True},
                                  "temperature": 0.2, "tool_choice": "auto"}


@pytest.mark.parametrize("body", [b"nope", b"[]", b'{"messages": [1]}'])
def test_bad_request_raises_decode_error(body):
    with pytest.raises(DecodeError):
        DIALECT.parse_request(body)


