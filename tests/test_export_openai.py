"""`--format openai`: sessions recorded from every dialect, checked field by field, against a
checker of OpenAI's documented rules for chat fine-tuning data, and as the openai SDK's
request types. The checker of OpenAI's rules is `openai_problems` (tests/formats.py).
"""

from __future__ import annotations

import orjson
import pytest
from export_checks import openai_problems
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam
from pydantic import TypeAdapter
from recorded_sessions import (
    ANTHROPIC_TOOLS,
    OPENAI_TOOL,
    PROMPT,
    SESSIONS,
    SYSTEM,
    TOOL_OUTPUT,
    export_lines,
    first_calls,
    recorded_store,
)

FINAL = f"The command printed: {TOOL_OUTPUT}"


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return recorded_store(tmp_path_factory.getbasetemp() / "export-sessions")


def one_line(url, dialect, **options) -> tuple[dict, object]:
    lines, tally = export_lines(url, "openai", dialect, **options)
    assert len(lines) == 1, lines
    return lines[0], tally


def function_tool(spec: dict) -> dict:
    return {"type": "function", "function": spec}


# --- the checker can fail ----------------------------------------------------------------------

GOOD = {"messages": [{"role": "user", "content": "hi"},
                     {"role": "assistant", "content": None, "weight": 1, "tool_calls": [
                         {"id": "c1", "type": "function",
                          "function": {"name": "f", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "out"},
                     {"role": "assistant", "content": "done", "weight": 1}]}


@pytest.mark.parametrize("breakage, expected", [
    (lambda line: line.update(metadata={}), "unknown key metadata"),
    (lambda line: line["messages"].pop(2), "not answered"),
    (lambda line: line["messages"][2].update(tool_call_id="c9"), "answers no open call"),
    (lambda line: line["messages"][1]["tool_calls"][0]["function"].update(arguments={}),
     "bad tool call"),
    (lambda line: line["messages"][1]["tool_calls"][0]["function"].update(arguments="{"),
     "not JSON"),
    (lambda line: line["messages"][3].update(weight=2), "weight is not 0 or 1"),
    (lambda line: line["messages"][2].update(content=[{"type": "text", "text": "x"}]),
     "string content"),
    (lambda line: line["messages"].pop(), "does not end on an assistant"),
    (lambda line: [m.update(weight=0) for m in line["messages"] if m["role"] == "assistant"],
     "no assistant message is trained on"),
    (lambda line: line["messages"][0].update(role="developer"), "unknown role"),
    (lambda line: line["messages"][3].update(reasoning_content="x"), "unknown key"),
    (lambda line: line.update(tools=[{"type": "function", "function": {"name": "a b"}}]),
     "bad tool"),
])
def test_the_checker_catches_each_rule(breakage, expected):
    assert openai_problems(GOOD) == []
    line = orjson.loads(orjson.dumps(GOOD))
    breakage(line)
    assert any(expected in p for p in openai_problems(line)), openai_problems(line)


# --- every dialect, field by field -----------------------------------------------------------


def test_anthropic_session(url):
    line, tally = one_line(url, "anthropic.messages")
    [call] = first_calls(url, "anthropic.messages")
    assert line == {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
            {"role": "assistant", "content": "I'll run that command.", "weight": 1,
             "tool_calls": [{"id": call.id, "type": "function", "function": {
                 "name": "Bash", "arguments": orjson.dumps(call.arguments).decode()}}]},
            {"role": "tool", "tool_call_id": call.id, "content": TOOL_OUTPUT},
            {"role": "assistant", "content": FINAL, "weight": 1},
        ],
        "tools": [function_tool({"name": "Bash", "description": "Run a command",
                                 "parameters": ANTHROPIC_TOOLS[0]["input_schema"]})],
        "parallel_tool_calls": True,
    }
    assert tally.dropped["reasoning blocks"] == 1  # the signed thinking has no place here
    assert tally.skipped["side calls (threads)"] == 1  # count_tokens


def test_openai_chat_session_with_parallel_calls(url):
    line, _ = one_line(url, "openai.chat")
    calls = first_calls(url, "openai.chat")
    assert len(calls) == 2
    assert line["messages"][:2] == [{"role": "system", "content": SYSTEM},
                                    {"role": "user", "content": PROMPT}]
    assert line["messages"][2] == {"role": "assistant", "content": None, "weight": 1,
                                   "tool_calls": [{"id": c.id, "type": "function", "function": {
                                       "name": "exec_command", "arguments": c.arguments_raw}}
                                       for c in calls]}
    assert line["messages"][3:] == [
        *[{"role": "tool", "tool_call_id": c.id, "content": TOOL_OUTPUT} for c in calls],
        {"role": "assistant", "content": FINAL, "weight": 1}]
    assert line["tools"] == [function_tool(OPENAI_TOOL)]
    assert line["parallel_tool_calls"] is True


def test_openai_responses_session(url):
    line, _ = one_line(url, "openai.responses")
    [call] = first_calls(url, "openai.responses")
    assert [m["role"] for m in line["messages"]] == ["system", "user", "assistant", "tool",
                                                     "assistant"]
    assert line["messages"][0]["content"] == SYSTEM  # from `instructions`
    assert line["messages"][2] == {"role": "assistant", "content": "I'll run that command.",
                                   "weight": 1, "tool_calls": [{
                                       "id": call.id, "type": "function", "function": {
                                           "name": "exec_command",
                                           "arguments": call.arguments_raw}}]}
    assert line["messages"][3] == {"role": "tool", "tool_call_id": call.id,
                                   "content": TOOL_OUTPUT}
    assert line["messages"][4]["content"] == FINAL
    assert line["tools"] == [function_tool(OPENAI_TOOL)]


def test_gemini_session(url):
    line, tally = one_line(url, "gemini.generate")
    [call] = first_calls(url, "gemini.generate")
    assert call.id == "run_shell_command"  # Gemini sends no ids: the decoder names the call
    assert line["messages"][2]["tool_calls"][0] == {
        "id": call.id, "type": "function",
        "function": {"name": "run_shell_command", "arguments": call.arguments_raw}}
    assert line["messages"][3] == {"role": "tool", "tool_call_id": call.id,
                                   "content": orjson.dumps({"output": TOOL_OUTPUT}).decode()}
    assert line["messages"][-1] == {"role": "assistant", "content": FINAL, "weight": 1}
    assert tally.dropped["reasoning blocks"] == 2  # a thought in each model turn


@pytest.mark.parametrize("dialect", list(SESSIONS))
def test_every_export_passes_the_openai_rules(url, dialect):
    line, _ = one_line(url, dialect)
    assert openai_problems(line) == []


@pytest.mark.parametrize("dialect", list(SESSIONS))
def test_every_message_is_an_openai_sdk_message_param(url, dialect):
    line, _ = one_line(url, dialect)
    messages = TypeAdapter(list[ChatCompletionMessageParam])
    messages.validate_python([{k: v for k, v in m.items() if k != "weight"}
                              for m in line["messages"]])
    TypeAdapter(list[ChatCompletionFunctionToolParam]).validate_python(line["tools"])


def test_keep_extras_keeps_reasoning_and_says_where_a_line_came_from(url):
    line, tally = one_line(url, "anthropic.messages", keep_extras=True)
    assert line["messages"][-1]["reasoning_content"] == "The tool ran; report it."
    assert tally.converted["reasoning (as reasoning_content)"] == 1
    assert tally.dropped["reasoning blocks"] == 0
    assert line["x_forge"]["session_id"] == SESSIONS["anthropic.messages"][0]
    assert line["x_forge"]["dialect"] == "anthropic.messages"


def test_side_calls_export_on_request(url):
    lines, tally = export_lines(url, "openai", "anthropic.messages", include_side_calls=True)
    assert len(lines) == 1  # count_tokens has no response to train on
    assert tally.skipped["segments with no response"] == 1
