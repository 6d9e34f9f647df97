"""`--format sharegpt`: every dialect as LLaMA-Factory's sharegpt formatting reads it: turns
that alternate (human/observation, then gpt/function_call), function_call values that parse
as {name, arguments} (a list for parallel calls), a tools column that parses as a list."""

from __future__ import annotations

import orjson
import pytest
from export_checks import llama_factory_reads
from recorded_sessions import (
    PROMPT,
    SESSIONS,
    SYSTEM,
    TOOL_OUTPUT,
    export_lines,
    first_calls,
    recorded_store,
)

from forge_record.exporters.base import Tally
from forge_record.exporters.sharegpt import to_line
from forge_record.exporters.units import Conversation, ThreadInfo
from forge_record.records import Exchange, Message, Request, Response, Text

FINAL = f"The command printed: {TOOL_OUTPUT}"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return recorded_store(tmp_path_factory.getbasetemp() / "export-sessions")


@pytest.mark.parametrize("dialect", list(SESSIONS))
def test_every_dialect_reads_as_llama_factory_wants(url, dialect):
    [line], _ = export_lines(url, "sharegpt", dialect)
    assert llama_factory_reads(line) == []
    assert line["system"] == SYSTEM
    assert line["conversations"][0] == {"from": "human", "value": PROMPT}
    assert line["conversations"][-1] == {"from": "gpt", "value": FINAL}


def test_anthropic_session_field_by_field(url):
    [line], tally = export_lines(url, "sharegpt", "anthropic.messages")
    [call] = first_calls(url, "anthropic.messages")
    assert line["conversations"] == [
        {"from": "human", "value": PROMPT},
        {"from": "function_call",
         "value": orjson.dumps({"name": "Bash", "arguments": call.arguments}).decode()},
        {"from": "observation", "value": TOOL_OUTPUT},
        {"from": "gpt", "value": FINAL},
    ]
    assert orjson.loads(line["tools"]) == [{"name": "Bash", "description": "Run a command",
                                            "parameters": {
                                                "type": "object", "required": ["command"],
                                                "properties": {"command": {"type": "string"}}}}]
    assert tally.dropped["text beside tool calls"] == 1  # "I'll run that command."
    assert tally.dropped["reasoning blocks"] == 1


def test_parallel_calls_are_one_function_call_turn_with_a_list(url):
    [line], _ = export_lines(url, "sharegpt", "openai.chat")
    calls = first_calls(url, "openai.chat")
    turn = line["conversations"][1]
    assert turn["from"] == "function_call"
    assert orjson.loads(turn["value"]) == [{"name": c.name, "arguments": c.arguments}
                                           for c in calls]
    assert line["conversations"][2] == {"from": "observation",
                                        "value": f"{TOOL_OUTPUT}\n\n{TOOL_OUTPUT}"}


def conversation(messages: list[Message]) -> Conversation:
    ex = Exchange(dialect="openai.chat", request=Request(messages=messages[:-1]),
                  response=Response(content=messages[-1].content))
    return Conversation(data=None, thread=ThreadInfo("main", "main"), segment=0, final=ex,
                        system=[], tools=[], messages=messages, trained=[True] * len(messages))


def test_a_conversation_that_opens_on_the_model_side_is_refused():
    tally = Tally()
    opens_with_model = conversation([Message(role="assistant", content=[Text(text="hi")]),
                                     Message(role="user", content=[Text(text="q")]),
                                     Message(role="assistant", content=[Text(text="a")])])
    assert to_line(opens_with_model, False, tally) is None
    fine = conversation(opens_with_model.messages[1:])
    assert to_line(fine, False, tally)["conversations"] == [{"from": "human", "value": "q"},
                                                            {"from": "gpt", "value": "a"}]
