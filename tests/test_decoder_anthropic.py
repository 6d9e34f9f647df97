"""The Anthropic Messages dialect: requests, JSON bodies and the SSE fold.

Streams come from tests/data/sse/anthropic/*.sse. Each is decoded under many chunkings (the
fold must not care where the network cut the bytes) and, when it ends with message_stop,
checked against the official SDK: its accumulated final message, fed to the JSON decoder,
must give the same Response as our streamed fold.
"""

from __future__ import annotations

import base64
import hashlib

import anthropic
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

from forge_record.decoders.anthropic_messages import DIALECT
from forge_record.errors import DecodeError
from forge_record.records import (
    Media,
    Message,
    Other,
    Reasoning,
    Response,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    request_from_dict,
    request_to_dict,
)

CASES = sse_cases("anthropic")
COMPLETE_CASES = [name for name, body in CASES.items() if b"event: message_stop" in body]


def decode_stream(chunks: list[bytes]):
    return decode_chunks(DIALECT, "text/event-stream; charset=utf-8", chunks)


def decode_body(body: bytes):
    return decode_json_body(DIALECT, body)


def stream(name: str) -> Response:
    return decode_stream([CASES[name]])[0]


# --- the record round trip (chunking, framing and garbage: test_decoder_contract.py) ------


@pytest.mark.parametrize("name", CASES)
def test_response_survives_the_record_round_trip(name):
    response = stream(name)
    assert record_round_trip(response) == response


# --- streamed and whole-body paths agree with the official SDK ------------------------------


def sdk_final_message(body: bytes, surface: str) -> bytes:
    client = anthropic.Anthropic(api_key="sk-ant-dummy", base_url="http://test",
                                 http_client=sse_http_client(body), max_retries=0)
    messages = client.beta.messages if surface == "beta" else client.messages
    with messages.stream(
        model="claude-haiku-4-5",  # what is asked does not matter; the mock answers
        max_tokens=1024,
        messages=[{"role": "user", "content": "hi"}],
    ) as events:
        message = events.get_final_message()
    # exclude_unset keeps exactly the fields the wire carried (explicit nulls included), as a
    # non-streaming body would; the SDK's defaults for absent fields are not on the wire.
    return message.model_dump_json(exclude_unset=True).encode()


@pytest.mark.parametrize("surface", ["messages", "beta"])
@pytest.mark.parametrize("name", COMPLETE_CASES)
def test_stream_equals_sdk_final_message_as_body(name, surface):
    streamed, complete = decode_stream([CASES[name]])
    from_body, body_complete = decode_body(sdk_final_message(CASES[name], surface))
    assert complete and body_complete
    # The SDK drops events it does not know; we keep them, and nothing else differs.
    streamed.extras.pop("unknown_events", None)
    assert streamed == from_body


# --- what each stream means --------------------------------------------------------------


def test_text_with_ping():
    response = stream("text_with_ping")
    assert response.id == "msg_01XFDUDYJgAACzvnptvVoYEL"
    assert response.model == "claude-sonnet-4-5-20250929"
    assert response.content == [Text(text="Hello! How can I help you with your code today?")]
    assert response.stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (25, 15)
    assert response.usage.raw["service_tier"] == "standard"
    assert response.extras == {}


def test_thinking_signature_replaces_and_text_follows():
    response = stream("thinking_then_text")
    reasoning, text = response.content
    assert reasoning.text.startswith("The user wants 27 * 453.\n\n27 * 453 = ")
    assert reasoning.signature.startswith("EqQBCgIYAhIM") and reasoning.encrypted is None
    assert text == Text(text="27 × 453 = **12,231**")
    assert response.usage.reasoning_tokens == 71


def test_tool_use_input_assembled_from_fragments():
    response = stream("tool_use_bash")
    call = response.content[1]
    assert call == ToolCall(
        id="toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        name="Bash",
        arguments={
            "command": "cd /home/dev/app && python -m pytest tests/ -x -q 2>&1 | tail -20",
            "description": "Run the test suite and show failures",
        },
        arguments_raw=orjson.dumps(call.arguments).decode(),
    )
    assert response.stop_reason == "tool_use"
    assert response.usage.cache_read_tokens == 18211
    assert response.usage.cache_write_tokens == 1024


def test_parallel_tool_calls_keep_their_own_inputs():
    _, read, grep = stream("parallel_tool_use").content
    assert (read.name, read.arguments) == ("Read", {"file_path": "/home/dev/app/src/config.py"})
    assert grep.name == "Grep"
    assert grep.arguments == {
        "pattern": "load_config\\(",
        "path": "src",
        "output_mode": "content",
        "-n": True,
    }


def test_server_tool_use_result_and_citations():
    response = stream("web_search_citations")
    _, search, result, _, cited, _ = response.content
    assert search == ToolCall(
        id="srvtoolu_014hJH82Qum7Td6UV8gDXThB",
        name="web_search",
        arguments={"query": "latest Python release version"},
        arguments_raw='{"query":"latest Python release version"}',
        server=True,
    )
    assert isinstance(result, ToolResult) and result.name == "web_search_tool_result"
    assert result.tool_call_id == search.id and not result.is_error
    assert [r["url"] for r in result.content[0].data][0].startswith("https://www.python.org/")
    assert cited.text == "Python 3.14.0, released on October 7, 2025"
    assert [c["encrypted_index"][:6] for c in cited.citations] == ["Eo8BCi", "EpMBCi"]
    assert response.usage.raw["server_tool_use"] == {"web_search_requests": 1}


def test_redacted_thinking_is_kept_encrypted():
    thinking, redacted, _ = stream("redacted_thinking").content
    assert thinking.signature.startswith("ErUBCkYI")
    assert redacted == Reasoning(encrypted=redacted.encrypted)
    assert redacted.encrypted.startswith("EmwKAhgBEgy3va3pzix")


def test_cumulative_usage_takes_latest_values_never_sums():
    response = stream("cumulative_usage")
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens) == (4, 87)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (20480, 1536)
    assert response.stop_reason == "end_turn"
    assert response.content == [
        Text(
            text="The refactor is done: `parse_config` now returns a frozen dataclass."
            " All 212 tests pass."
        )
    ]


def test_error_event_in_200_stream_sets_error_and_stays_incomplete():
    response, complete = decode_stream([CASES["error_mid_stream"]])
    assert not complete
    assert response.error == {"type": "overloaded_error", "message": "Overloaded"}
    assert response.extras == {"request_id": "req_011CVQ2vKpTd3eZmNbqXr8Ys"}
    assert response.content == [
        Text(text="Looking at the stack trace, the failure comes from the retry loop in")
    ]
    assert response.stop_reason is None


def test_unknown_event_is_kept_verbatim():
    response = stream("unknown_event")
    assert response.extras["unknown_events"] == [
        {"type": "model_status", "status": "warm", "queue_ms": 12}
    ]
    assert response.content == [Text(text="Fix the typo in README")]


def test_non_ascii_text_and_tool_input():
    text, write = stream("non_ascii").content
    assert text.text == "こんにちは、世界！🌏 函数 `解析()` 返回 None — ça marche 👩‍💻✅ (Ωμέγα)"
    assert write.arguments == {"file_path": "/tmp/挨拶.txt", "content": "こんにちは 🎉\n"}


# --- streams that stop early or break the rules ------------------------------------------


def test_truncated_inside_tool_input_keeps_partial_json():
    body = CASES["tool_use_bash"]
    cut = body.index(b"iption")  # mid-line, inside the third-to-last input fragment
    decoder = DIALECT.response_decoder("text/event-stream")
    decoder.feed(body[:cut])
    response = decoder.finish()
    assert not decoder.complete
    text, call = response.content
    assert text == Text(text="I'll run the test suite to see what fails.")
    assert call.arguments is None and call.parse_error
    assert call.arguments_raw == (
        '{"command": "cd /home/dev/app && python -m pytest tests/ -x -q 2>&1 | tail -20", "descr'
    )
    assert response.stop_reason is None
    assert response.usage.input_tokens == 3
    # the half line that was cut is kept, not applied
    assert response.extras["undecoded_events"][0]["data"].endswith('"partial_json":"')


def test_unparsable_tool_input_keeps_raw_with_parse_error():
    body = CASES["tool_use_bash"].replace(b' and show failures\\"}', b' and show failures\\"')
    call = decode_stream([body])[0].content[1]
    assert call.parse_error and call.arguments is None
    assert call.arguments_raw.endswith('"Run the test suite and show failures"')


def test_tool_use_without_input_deltas_keeps_start_input():
    events = [
        {"type": "message_start", "message": {"id": "msg_01", "model": "m", "content": []}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "toolu_01", "name": "Now", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": ""}},
        {"type": "content_block_stop", "index": 0},
    ]
    body = b"".join(b"event: %s\ndata: %s\n\n" % (e["type"].encode(), orjson.dumps(e))
                    for e in events)
    assert decode_stream([body])[0].content == [
        ToolCall(id="toolu_01", name="Now", arguments={}, arguments_raw="{}")
    ]


def test_delta_for_missing_block_is_kept_aside():
    body = CASES["text_with_ping"].replace(b'"index":0,"delta"', b'"index":5,"delta"', 1)
    response = decode_stream([body])[0]
    assert response.content == [Text(text="! How can I help you with your code today?")]
    assert '"index":5' in response.extras["undecoded_events"][0]["data"]


def test_events_before_message_start_are_tolerated():
    body = CASES["text_with_ping"]
    start_end = body.index(b"\n\n") + 2
    response, complete = decode_stream([body[start_end:]])
    assert complete and response.id is None
    assert response.content == [Text(text="Hello! How can I help you with your code today?")]
    assert response.usage.output_tokens == 15


# --- whole JSON bodies -------------------------------------------------------------------

MESSAGE_BODY = {
    "id": "msg_01EcyWo6m4hyW8KHs2y2pei5",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "text", "text": "I'll read the file first."},
        {"type": "tool_use", "id": "toolu_01D7FLrfh4GYq7yT1ULFeyMV", "name": "Read",
         "input": {"file_path": "/home/dev/app/main.py", "limit": 200}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 9000, "output_tokens": 64},
}


def test_json_body_message():
    response, complete = decode_body(orjson.dumps(MESSAGE_BODY))
    assert complete
    assert response.id == "msg_01EcyWo6m4hyW8KHs2y2pei5"
    assert response.content[1] == ToolCall(
        id="toolu_01D7FLrfh4GYq7yT1ULFeyMV", name="Read",
        arguments={"file_path": "/home/dev/app/main.py", "limit": 200},
        arguments_raw='{"file_path":"/home/dev/app/main.py","limit":200}',
    )
    assert (response.usage.cache_read_tokens, response.usage.output_tokens) == (9000, 64)
    assert response.stop_reason == "tool_use" and response.extras == {}


def test_json_error_body_529_overloaded():
    body = (b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},'
            b'"request_id":"req_011CVR8Z3k1nLmPq"}')
    response, complete = decode_body(body)
    assert complete
    assert response.error == {"type": "overloaded_error", "message": "Overloaded"}
    assert response.extras == {"request_id": "req_011CVR8Z3k1nLmPq"}
    assert response.content == [] and response.id is None


def test_json_count_tokens_body():
    response, _ = decode_body(b'{"input_tokens": 2095}')
    assert response.extras == {"input_tokens": 2095}


@pytest.mark.parametrize("body", [b"", b"<html>502 Bad Gateway</html>", b"[1, 2]",
                                  b'{"content": 5}'])
def test_json_body_that_breaks_the_protocol_raises_decode_error(body):
    assert_json_body_breaks_the_protocol(DIALECT, body)


# --- requests ----------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))

CLAUDE_CODE_REQUEST = {
    "model": "claude-sonnet-4-5-20250929",
    "max_tokens": 32000,
    "stream": True,
    "temperature": 1,
    "metadata": {"user_id": "user_3f9a_account__session_8c1d"},
    "thinking": {"type": "enabled", "budget_tokens": 10000},
    "tool_choice": {"type": "auto"},
    "system": [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
         "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Working directory: /home/dev/app",
         "cache_control": {"type": "ephemeral"}},
    ],
    "tools": [
        {"name": "Bash", "description": "Executes a given bash command.",
         "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                          "required": ["command"]}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
    ],
    "messages": [
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(PNG).decode()}},
            {"type": "text", "text": "Why does this screenshot show a failing test?"},
        ]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Run the tests.", "signature": "EqQBsig"},
            {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "Bash",
             "input": {"command": "pytest -x", "description": "Run tests"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
             "content": "1 failed, 41 passed", "is_error": True,
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Fix it."},
        ]},
    ],
}


def test_parse_claude_code_request():
    request = DIALECT.parse_request(orjson.dumps(CLAUDE_CODE_REQUEST))
    assert request.model == "claude-sonnet-4-5-20250929" and request.stream
    assert request.system == [
        Text(text="You are Claude Code, Anthropic's official CLI for Claude."),
        Text(text="Working directory: /home/dev/app"),
    ]
    assert request.tools == [
        Tool(name="Bash", description="Executes a given bash command.",
             parameters=CLAUDE_CODE_REQUEST["tools"][0]["input_schema"]),
        Tool(kind="web_search_20250305", name="web_search", parameters={"max_uses": 5}),
    ]
    assert request.parameters == {
        "max_tokens": 32000, "temperature": 1,
        "metadata": {"user_id": "user_3f9a_account__session_8c1d"},
        "thinking": {"type": "enabled", "budget_tokens": 10000},
        "tool_choice": {"type": "auto"},
    }
    image, question = request.messages[0].content
    assert image == Media(type="image", media_type="image/png", size=len(PNG),
                          sha256=hashlib.sha256(PNG).hexdigest())
    assert request.messages[1] == Message(role="assistant", content=[
        Reasoning(text="Run the tests.", signature="EqQBsig"),
        ToolCall(id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", name="Bash",
                 arguments={"command": "pytest -x", "description": "Run tests"},
                 arguments_raw='{"command":"pytest -x","description":"Run tests"}'),
    ])
    assert request.messages[2].content == [
        ToolResult(tool_call_id="toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                   content=[Text(text="1 failed, 41 passed")], is_error=True),
        Text(text="Fix it."),
    ]
    assert request_from_dict(orjson.loads(orjson.dumps(request_to_dict(request)))) == request


def test_parse_request_string_content_and_other_blocks():
    request = DIALECT.parse_request(orjson.dumps({
        "model": "claude-haiku-4-5-20251001", "system": "Be brief.", "max_tokens": 64,
        "messages": [
            {"role": "user", "content": "hello"},
            {"role": "user", "content": [
                {"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}},
                {"type": "redacted_thinking", "data": "EmwKAh"},
                {"type": "search_result", "source": "s", "title": "t", "content": [],
                 "cache_control": {"type": "ephemeral"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01",
                 "content": {"type": "web_search_tool_result_error", "error_code": "max_uses"}},
            ]},
        ],
    }))
    assert request.system == [Text(text="Be brief.")] and not request.stream
    assert request.messages[0].content == [Text(text="hello")]
    document, redacted, other, search_error = request.messages[1].content
    assert document == Media(type="document", url="https://x.test/a.pdf",
                             sha256=hashlib.sha256(b"https://x.test/a.pdf").hexdigest())
    assert redacted == Reasoning(encrypted="EmwKAh")
    assert other == Other(data={"type": "search_result", "source": "s", "title": "t",
                                "content": []})
    assert search_error.is_error and search_error.name == "web_search_tool_result"


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"messages": [{"content": "x"}]}',
                                  b'{"tools": 3}'])
def test_parse_request_that_breaks_the_protocol_raises_decode_error(body):
    with pytest.raises(DecodeError):
        DIALECT.parse_request(body)


