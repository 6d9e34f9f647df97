"""The OpenAI Responses dialect: request parsing, JSON bodies, the SSE stream and the event
fold it shares with the WebSocket path.

Streams come from tests/data/sse/openai_responses/*.sse. Each is decoded under many
chunkings and, when it ends with `response.completed`, checked against the official `openai`
SDK: the response `responses.stream(...).get_final_response()` builds from the same bytes,
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
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_record.decoders.openai_responses import (
    DIALECT,
    ResponsesFold,
    parse_responses_request,
)
from forge_record.errors import DecodeError
from forge_record.records import Media, Message, Other, Reasoning, Text, Tool, ToolCall, ToolResult

CASES = sse_cases("openai_responses")
COMPLETED_CASES = [n for n, body in CASES.items() if b"event: response.completed" in body]


def decode_stream(chunks: list[bytes]):
    return decode_chunks(DIALECT, "text/event-stream; charset=utf-8", chunks)


def decode_body(body: bytes):
    return decode_json_body(DIALECT, body)


def stream(name: str):
    return decode_stream([CASES[name]])[0]


def events(name: str) -> list[dict]:
    return [orjson.loads(line[6:]) for line in CASES[name].splitlines()
            if line.startswith(b"data: ")]


# --- the record round trip (chunking, framing and garbage: test_decoder_contract.py) ------


@pytest.mark.parametrize("name", CASES)
def test_response_survives_the_record_round_trip(name):
    response = stream(name)
    assert record_round_trip(response) == response


@pytest.mark.parametrize("name", CASES)
def test_fold_over_parsed_events_equals_the_sse_decoder(name):
    """The WebSocket path feeds the fold parsed frames; it must agree with SSE."""
    fold = ResponsesFold()
    for event in events(name):
        fold.apply(event)
    streamed, complete = decode_stream([CASES[name]])
    assert (fold.finish(), fold.complete) == (streamed, complete)


# --- streamed and whole-body paths agree with the official SDK ------------------------------


def sdk_final_response(body: bytes) -> bytes:
    client = openai.OpenAI(api_key="sk-dummy-key", base_url="http://test/v1", max_retries=0,
                           http_client=sse_http_client(body))
    with client.responses.stream(model="gpt-5", input="hi") as events:
        response = events.get_final_response()
    return response.model_dump_json(exclude_unset=True).encode()


@pytest.mark.parametrize("name", COMPLETED_CASES)
def test_stream_equals_sdk_final_response_as_body(name):
    streamed, complete = decode_stream([CASES[name]])
    from_body, body_complete = decode_body(sdk_final_response(CASES[name]))
    assert complete and body_complete
    # The SDK drops events it does not know; we keep them, and nothing else differs.
    streamed.extras.pop("unknown_events", None)
    assert streamed == from_body


def test_sdk_comparison_can_fail():
    body = CASES["function_call"]
    tampered = body.replace(b'"name":"exec_command"', b'"name":"exec_commanx"')
    assert tampered != body
    assert decode_stream([tampered])[0] != decode_body(sdk_final_response(body))[0]


# --- what each stream means --------------------------------------------------------------


def test_message_text_and_usage():
    response, complete = decode_stream([CASES["message_text"]])
    assert complete
    assert response.id == "resp_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
    assert response.model == "gpt-5-2025-08-07"
    assert response.content == [Text(text="The test fails because `parse_config` now returns a "
                                      "`Config` object — not a dict. ✓")]
    assert response.stop_reason == "completed"
    usage = response.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (1024, 4096, 42)
    assert usage.raw["input_tokens"] == 5120
    assert response.extras == {
        "created_at": 1764489300, "status": "completed", "service_tier": "auto",
        "output_items": [{"type": "message", "id": "msg_0a1b2c3d4e5f607182930001",
                          "status": "completed", "role": "assistant"}]}


def test_reasoning_encrypted_and_function_call():
    response = stream("function_call")
    reasoning, call = response.content
    assert reasoning.text == "" and reasoning.encrypted.startswith("gAAAAABpK4mW")
    assert call == ToolCall(id="call_Fq8Xz2VbN7mK3pL0sT5wYa1R", name="exec_command",
                            arguments={"cmd": "cd /repo && python -m pytest -x -q",
                                       "yield_time_ms": 10000},
                            arguments_raw='{"cmd":"cd /repo && python -m pytest -x -q",'
                                          '"yield_time_ms":10000}')
    assert response.extras["output_items"][1] == {
        "type": "function_call", "id": "fc_1b2c3d4e5f607182930002",
        "call_id": "call_Fq8Xz2VbN7mK3pL0sT5wYa1R", "status": "completed"}
    assert response.usage.reasoning_tokens == 64


def test_custom_tool_call_keeps_freeform_input():
    text, patch = stream("custom_tool_call_apply_patch").content
    assert text == Text(text="I'll fix the return type.")
    assert patch.name == "apply_patch" and patch.arguments is None and not patch.parse_error
    assert patch.arguments_raw.startswith("*** Begin Patch\n*** Update File: src/config.py\n")
    items = stream("custom_tool_call_apply_patch").extras["output_items"]
    assert items[0]["phase"] == "commentary" and items[1]["type"] == "custom_tool_call"


def test_reasoning_summary_parts_are_joined():
    reasoning, text = stream("reasoning_summary").content
    assert reasoning.text == (
        "**Locating the parser**\n\nThe failure points at `parse_config`; I should read it."
        "\n\n**Planning the fix**\n\nReturning a dict keeps callers working.")
    assert reasoning.encrypted.endswith("==")
    assert text == Text(text="Done: `parse_config` returns a dict again.")


def test_web_search_call_is_a_server_tool_call_and_citations_are_kept():
    search, text = stream("web_search_call").content
    assert search.server and search.name == "web_search" and search.id == "ws_4e5f607182930001"
    assert search.arguments["query"] == "python 3.14 release date"
    assert text.citations[0]["type"] == "url_citation"


def test_failed_response_sets_error():
    response, complete = decode_stream([CASES["failed"]])
    assert complete and response.stop_reason == "failed"
    assert response.error["code"] == "server_error"
    assert response.content == []


def test_incomplete_response_gives_the_reason():
    response, complete = decode_stream([CASES["incomplete_max_tokens"]])
    assert complete and response.error is None
    assert response.stop_reason == "max_output_tokens"
    assert response.content[1] == Text(text="Here is the start of a long explanation that")
    assert response.extras["incomplete_details"] == {"reason": "max_output_tokens"}


def test_unknown_event_is_kept_verbatim():
    response = stream("unknown_event")
    [unknown] = response.extras["unknown_events"]
    assert unknown["type"] == "response.future_progress"
    assert unknown["progress"] == {"stage": "drafting", "percent": 40}
    assert response.content == [Text(text="All tests pass now.")]


def test_cut_before_completed_is_rebuilt_from_items_and_deltas():
    response, complete = decode_stream([CASES["cut_before_completed"]])
    assert not complete and response.stop_reason is None
    reasoning, call = response.content
    assert reasoning.text == "**Checking the tree**"  # from its output_item.done
    assert call.id == "call_Cut1Xy2Zw3Vu4Ts5Rq6Po7Nm" and call.parse_error
    assert call.arguments_raw == '{"cmd":"git status --short","work'  # from the deltas
    assert response.extras["output_items"][1]["status"] == "in_progress"


def test_error_event_sets_error_and_stays_incomplete():
    response, complete = decode_stream([CASES["error_event"]])
    assert not complete
    assert response.error["code"] == "server_error"
    assert response.content == [Text(text="Let me")]


def test_completed_without_output_takes_the_done_items():
    response, complete = decode_stream([CASES["completed_without_output"]])
    assert complete and [b.type for b in response.content] == ["reasoning", "tool_call"]
    assert response.content[1].arguments == {"cmd": "sed -n 1,40p src/config.py"}


def test_done_events_win_over_deltas():
    fold = ResponsesFold()
    for event in [
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"type": "message", "id": "m", "role": "assistant", "content": []}},
        {"type": "response.content_part.added", "output_index": 0, "content_index": 0,
         "part": {"type": "output_text", "text": "", "annotations": []}},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
         "delta": "Helo"},
        {"type": "response.output_text.done", "output_index": 0, "content_index": 0,
         "text": "Hello"},
        {"type": "response.refusal.delta", "output_index": 0, "content_index": 1,
         "delta": "No."},
    ]:
        fold.apply(event)
    assert fold.finish().content == [Text(text="Hello"),
                                     Other(data={"type": "refusal", "refusal": "No."})]


def test_deltas_without_added_events_still_count():
    fold = ResponsesFold()
    fold.apply({"type": "response.reasoning_summary_text.delta", "output_index": 0,
                "item_id": "rs", "summary_index": 1, "delta": "second"})
    fold.apply({"type": "response.reasoning_text.delta", "output_index": 0,
                "item_id": "rs", "content_index": 0, "delta": "raw"})
    assert fold.finish().content == [Reasoning(text="second\n\nraw")]


def test_wrapped_error_frame_and_bad_events():
    fold = ResponsesFold()
    fold.apply({"type": "error", "status": 429, "error": {"type": "usage_limit_reached",
                                                          "message": "limit"}})
    fold.apply("not an event")
    fold.apply({"type": "response.output_text.delta", "output_index": "x", "delta": 1})
    response = fold.finish()
    assert response.error == {"type": "usage_limit_reached", "message": "limit"}
    assert len(response.extras["undecoded_events"]) == 2 and not fold.complete


# --- hypothesis: random folds of this dialect's events never raise ------------------------


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "output_index", "content_index", "summary_index", "item",
                         "delta", "part", "response", "output", "text", "error"]),
        inner, max_size=4),
    max_leaves=12)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.fixed_dictionaries({"type": st.sampled_from([
    "response.created", "response.completed", "response.output_item.added",
    "response.output_item.done", "response.output_text.delta", "response.content_part.done",
    "response.reasoning_summary_part.added", "response.function_call_arguments.done", "error",
]), "output_index": st.integers(-1, 2) | json_values}, optional={
    "content_index": st.integers(-1, 2) | json_values, "summary_index": json_values,
    "delta": json_values, "item": json_values, "part": json_values, "response": json_values,
    "arguments": json_values, "text": json_values}), max_size=8))
def test_fold_of_random_events_never_raises(event_list):
    fold = ResponsesFold()
    for event in event_list:
        fold.apply(event)
    fold.finish()


# --- whole JSON bodies -------------------------------------------------------------------


def test_json_body_equals_the_stream_of_the_same_response():
    completed = [e for e in events("reasoning_summary") if e["type"] == "response.completed"]
    from_body, complete = decode_body(orjson.dumps(completed[0]["response"]))
    assert complete and from_body == stream("reasoning_summary")


def test_json_error_body():
    body = (b'{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error",'
            b'"param":null,"code":"invalid_api_key"}}')
    response, complete = decode_body(body)
    assert complete and response.error["code"] == "invalid_api_key" and response.content == []


def test_json_compact_body():
    body = orjson.dumps({"output": [{"type": "compaction", "encrypted_content": "gAAA..."}]})
    response, _ = decode_body(body)
    assert response.content == [Other(data={"type": "compaction",
                                            "encrypted_content": "gAAA..."})]


@pytest.mark.parametrize("body", [b"", b"<html>502 Bad Gateway</html>", b"[1, 2]",
                                  b'{"output": [5]}'])
def test_json_body_that_breaks_the_protocol_raises_decode_error(body):
    assert_json_body_breaks_the_protocol(DIALECT, body)


# --- requests ----------------------------------------------------------------------------

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"
CODEX_REQUEST = {
    "model": "gpt-5-codex",
    "instructions": "You are Codex, a coding agent.",
    "input": [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "<permissions>workspace-write</permissions>"}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "fix the test"},
                     {"type": "input_image", "image_url": "https://example.com/s.png"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Plan"}],
         "content": None, "encrypted_content": "gAAAA"},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "exec_command",
         "arguments": '{"cmd":"pytest"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "1 failed"},
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2", "name": "apply_patch",
         "input": PATCH, "status": "completed"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done!"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": "pytest docs"}},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Fixed.", "annotations": []}]},
        {"role": "user", "content": "thanks"},
        {"type": "item_reference", "id": "msg_old"},
    ],
    "tools": [
        {"type": "function", "name": "exec_command", "description": "Run a command",
         "parameters": {"type": "object"}, "strict": False},
        {"type": "custom", "name": "apply_patch", "description": "Patch files",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: ..."}},
        {"type": "web_search", "search_context_size": "low"},
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False,
    "stream": True,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "019a3c5e",
    "previous_response_id": "resp_prev",
}


def test_codex_request_is_normalized():
    request = DIALECT.parse_request(orjson.dumps(CODEX_REQUEST))
    assert request.model == "gpt-5-codex" and request.stream
    assert request.system == [Text(text="You are Codex, a coding agent.")]
    developer, user, calls, out1, patch, out2, answer, thanks, reference = request.messages
    assert developer.role == "developer"
    assert user.content[0] == Text(text="fix the test")
    assert isinstance(user.content[1], Media) and user.content[1].url.endswith("s.png")
    assert calls == Message(role="assistant", content=[
        Reasoning(text="Plan", encrypted="gAAAA"),
        ToolCall(id="call_1", name="exec_command", arguments={"cmd": "pytest"},
                 arguments_raw='{"cmd":"pytest"}')])
    assert out1 == Message(role="tool", content=[
        ToolResult(tool_call_id="call_1", content=[Text(text="1 failed")])])
    assert patch.content == [ToolCall(id="call_2", name="apply_patch", arguments_raw=PATCH)]
    assert out2.content[0].tool_call_id == "call_2"
    # a web search and the answer after it are one run of model output
    assert answer.role == "assistant" and [b.type for b in answer.content] == \
        ["tool_call", "text"]
    assert answer.content[0].server
    assert thanks == Message(role="user", content=[Text(text="thanks")])
    assert reference == Message(role="user", content=[
        Other(data={"type": "item_reference", "id": "msg_old"})])
    assert request.tools == [
        Tool(name="exec_command", description="Run a command", parameters={"type": "object"}),
        Tool(name="apply_patch", description="Patch files", kind="custom",
             parameters={"type": "grammar", "syntax": "lark", "definition": "start: ..."}),
        Tool(name="web_search", kind="web_search", parameters={"search_context_size": "low"}),
    ]
    assert request.parameters["previous_response_id"] == "resp_prev"
    assert set(request.parameters) == {"tool_choice", "parallel_tool_calls", "reasoning",
                                       "store", "include", "prompt_cache_key",
                                       "previous_response_id"}


def test_websocket_payload_keeps_its_own_fields_in_parameters():
    payload = {"type": "response.create", "model": "gpt-5-codex", "generate": False,
               "input": "hi", "instructions": [
                   {"type": "message", "role": "system", "content": "be brief"}]}
    request = parse_responses_request(payload)
    assert request.messages == [Message(role="user", content=[Text(text="hi")])]
    assert request.system == [Text(text="be brief")]
    assert request.parameters == {"type": "response.create", "generate": False}


@pytest.mark.parametrize("body", [b"nope", b"[]", b'{"input": [1]}'])
def test_bad_request_raises_decode_error(body):
    with pytest.raises(DecodeError):
        DIALECT.parse_request(body)


