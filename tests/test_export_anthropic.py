"""`--format anthropic`: Messages-native lines from every recorded dialect, field by field; they
validate as the anthropic SDK's request types; and a line replayed through the SDK is read
back by our own decoder as the conversation that was recorded (the round trip). The same
round trip for `--format openai` with the openai SDK lives here too, since both check that an
export is a request the provider's client would send."""

from __future__ import annotations

import anthropic
import openai
import orjson
import pytest
from anthropic.types import MessageParam, TextBlockParam, ToolParam
from pydantic import TypeAdapter
from recorded_sessions import (
    ANTHROPIC_TOOLS,
    OPENAI_TOOL,
    PROMPT,
    SESSIONS,
    SIGNATURE,
    SYSTEM,
    TOOL_OUTPUT,
    export_lines,
    first_calls,
    recorded_store,
)

from forge_record.decoders import dialect_named
from forge_record.mock import MockUpstream
from forge_record.records import Message, Reasoning
from forge_record.store import open_store

FINAL = f"The command printed: {TOOL_OUTPUT}"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return recorded_store(tmp_path_factory.getbasetemp() / "export-sessions")


def one_line(url, dialect, fmt="anthropic", **options):
    lines, tally = export_lines(url, fmt, dialect, **options)
    assert len(lines) == 1, lines
    return lines[0], tally


def recorded_conversation(url, dialect):
    """(system, tools, messages) of the session's last model call, its reply appended."""
    store = open_store(url)
    try:
        last = [e for e in store.iter_exchanges(SESSIONS[dialect][0]) if e.kind == "model"][-1]
    finally:
        store.close()
    reply = Message(role="assistant", content=last.response.content)
    return last.request.system, last.request.tools, [*last.request.messages, reply]


def test_anthropic_session_field_by_field(url):
    line, tally = one_line(url, "anthropic.messages")
    [call] = first_calls(url, "anthropic.messages")
    assert line == {
        "system": [{"type": "text", "text": SYSTEM}],
        "tools": [{"name": "Bash", "description": "Run a command",
                   "input_schema": ANTHROPIC_TOOLS[0]["input_schema"]}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": PROMPT}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "I'll run that command."},
                {"type": "tool_use", "id": call.id, "name": "Bash", "input": call.arguments}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                          "content": [{"type": "text", "text": TOOL_OUTPUT}]}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The tool ran; report it.",
                 "signature": SIGNATURE},
                {"type": "text", "text": FINAL}]},
        ],
    }
    assert not tally.dropped


def test_openai_chat_session_becomes_one_user_turn_of_results(url):
    line, _ = one_line(url, "openai.chat")
    calls = first_calls(url, "openai.chat")
    assert line["system"] == [{"type": "text", "text": SYSTEM}]
    assert line["tools"] == [{"name": "exec_command", "description": OPENAI_TOOL["description"],
                              "input_schema": OPENAI_TOOL["parameters"]}]
    assert [m["role"] for m in line["messages"]] == ["user", "assistant", "user", "assistant"]
    assert line["messages"][1]["content"] == [
        {"type": "tool_use", "id": c.id, "name": "exec_command", "input": c.arguments}
        for c in calls]
    assert line["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": c.id,
         "content": [{"type": "text", "text": TOOL_OUTPUT}]} for c in calls]


def test_gemini_thinking_is_dropped_and_ids_made_safe(url):
    line, tally = one_line(url, "gemini.generate")
    assistant = line["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["text", "tool_use"]  # the thought is gone
    assert assistant[1]["id"] == "run_shell_command"
    result = line["messages"][2]["content"][0]
    assert result["tool_use_id"] == "run_shell_command"
    assert orjson.loads(result["content"][0]["text"]) == {"output": TOOL_OUTPUT}
    assert tally.dropped["reasoning blocks"] == 2


def test_responses_session(url):
    line, _ = one_line(url, "openai.responses")
    [call] = first_calls(url, "openai.responses")
    assert line["messages"][1]["content"][1] == {"type": "tool_use", "id": call.id,
                                                 "name": "exec_command",
                                                 "input": call.arguments}
    assert line["messages"][-1]["content"] == [{"type": "text", "text": FINAL}]


@pytest.mark.parametrize("dialect", list(SESSIONS))
def test_every_export_validates_as_the_sdk_request_types(url, dialect):
    line, _ = one_line(url, dialect)
    TypeAdapter(list[MessageParam]).validate_python(line["messages"])
    TypeAdapter(list[TextBlockParam]).validate_python(line["system"])
    TypeAdapter(list[ToolParam]).validate_python(line["tools"])


def test_a_validation_can_fail():
    with pytest.raises(ValueError):
        TypeAdapter(list[MessageParam]).validate_python([{"role": "tool", "content": "x"}])


# --- round trips: replay a line with the SDK, decode what the API would get ------------------


def sent_by_the_anthropic_sdk(line: dict) -> bytes:
    """The request body the anthropic SDK sends (to a mock upstream) for an exported line."""
    with MockUpstream() as mock:
        client = anthropic.Anthropic(api_key="sk-ant-dummy-key", base_url=mock.url,
                                     max_retries=0)
        client.messages.create(model="claude-sonnet-4-5", max_tokens=100, **line)
        return mock.requests[-1].body


def test_anthropic_line_replays_as_the_recorded_conversation(url):
    line, _ = one_line(url, "anthropic.messages")
    replayed = dialect_named("anthropic.messages").parse_request(sent_by_the_anthropic_sdk(line))
    system, tools, messages = recorded_conversation(url, "anthropic.messages")
    assert (replayed.system, replayed.tools, replayed.messages) == (system, tools, messages)


def test_openai_line_replays_as_the_recorded_conversation(url):
    line, _ = one_line(url, "openai.chat", fmt="openai")
    messages = [{k: v for k, v in m.items() if k != "weight"} for m in line["messages"]]
    with MockUpstream() as mock:
        client = openai.OpenAI(api_key="sk-proj-dummy-key", base_url=mock.url + "/v1",
                               max_retries=0)
        client.chat.completions.create(model="gpt-4.1", messages=messages, tools=line["tools"],
                                       parallel_tool_calls=line["parallel_tool_calls"])
        sent = mock.requests[-1].body
    replayed = dialect_named("openai.chat").parse_request(sent)
    system, tools, recorded = recorded_conversation(url, "openai.chat")
    assert (replayed.system, replayed.tools, replayed.messages) == (system, tools, recorded)


def test_a_cross_dialect_round_trip_loses_only_what_was_counted(url):
    """Gemini to anthropic and back: the same conversation, less the thoughts."""
    line, tally = one_line(url, "gemini.generate")
    replayed = dialect_named("anthropic.messages").parse_request(sent_by_the_anthropic_sdk(line))
    _, _, recorded = recorded_conversation(url, "gemini.generate")
    without_thoughts = [Message(role="user" if m.role == "tool" else m.role,
                                content=[b for b in m.content if not isinstance(b, Reasoning)])
                        for m in recorded]
    lost = sum(isinstance(b, Reasoning) for m in recorded for b in m.content)
    assert lost == tally.dropped["reasoning blocks"] == 2
    assert [(m.role, [b.type for b in m.content]) for m in replayed.messages] == \
        [(m.role, [b.type for b in m.content]) for m in without_thoughts]
    assert replayed.messages[1].content[1].arguments == recorded[1].content[-1].arguments
