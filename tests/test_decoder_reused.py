"""decoders.base.Reused: a request's tools and system blocks that a recent request sent too
are that request's records, the very objects, and always what converting them gives.

Each dialect's bodies are written separately (new bytes, parsed anew, as Claude Code's are
when its billing block changes), so only `Reused` can make the records the same objects."""

from __future__ import annotations

import orjson
import pytest

from forge_record.decoders import anthropic_messages, gemini, openai_chat, openai_responses
from forge_record.decoders.base import Reused
from forge_record.lineage.signals import signals_of
from forge_record.records import Exchange


def _tools(names: list[str], changed: str = "") -> list[dict]:
    return [{"name": n, "description": f"does {n}{changed if n == 'b' else ''}",
             "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}}
            for n in names]


def anthropic(tools: list[dict], billing: str) -> bytes:
    return orjson.dumps({
        "model": "claude-x", "messages": [{"role": "user", "content": "hi"}],
        "system": [{"type": "text", "text": f"x-anthropic-billing-header: cch={billing};"},
                   {"type": "text", "text": "You are an agent.",
                    "cache_control": {"type": "ephemeral"}}],
        "tools": tools, "stream": True})


def chat(tools: list[dict], billing: str) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": billing}],
                         "tools": [{"type": "function", "function": {
                             "name": t["name"], "description": t["description"],
                             "parameters": t["input_schema"]}} for t in tools]})


def responses(tools: list[dict], billing: str) -> bytes:
    return orjson.dumps({"model": "m", "input": billing, "tools": [
        {"type": "function", "name": t["name"], "description": t["description"],
         "parameters": t["input_schema"]} for t in tools]})


def gemini_body(tools: list[dict], billing: str) -> bytes:
    return orjson.dumps({"contents": [{"role": "user", "parts": [{"text": billing}]}],
                         "tools": [{"functionDeclarations": [
                             {"name": t["name"], "description": t["description"],
                              "parameters": t["input_schema"]} for t in tools]},
                             {"googleSearch": {}}]})


DIALECTS = [(anthropic_messages.AnthropicMessages(), anthropic),
            (openai_chat.OpenAIChat(), chat),
            (openai_responses.OpenAIResponses(), responses),
            (gemini.GeminiGenerate(), gemini_body)]


@pytest.mark.parametrize(("dialect", "body"), DIALECTS, ids=[d.name for d, _ in DIALECTS])
def test_tools_a_recent_request_sent_are_its_records(dialect, body):
    names = ["a", "b", "c", "d"]
    first = dialect.parse_request(body(_tools(names), "1"))
    sub = dialect.parse_request(body(_tools(["s", "t"]), "2"))  # a sub-agent in between
    again = dialect.parse_request(body(_tools(names), "3"))
    changed = dialect.parse_request(body(_tools(names, changed=" now"), "4"))
    assert all(a is b for a, b in zip(first.tools, again.tools, strict=True))
    assert not any(a is b for a, b in zip(first.tools, sub.tools, strict=False))
    # one tool changed: a record of its own, the others shared (Gemini's declarations are
    # one value, the group they are listed in; its googleSearch tool is another)
    shared = [a is b for a, b in zip(again.tools, changed.tools, strict=True)]
    assert shared == ([False] * 4 + [True] if body is gemini_body else [True, False, True, True])
    # and every one is what converting it anew gives
    for request, tools in ((again, names), (changed, names)):
        assert request.tools == dialect.parse_request(
            body(_tools(tools, changed=" now" if request is changed else ""), "5x")).tools
    assert changed.tools[1].description == "does b now"


def test_system_blocks_after_a_changing_billing_block_are_shared():
    dialect = anthropic_messages.AnthropicMessages()
    one = dialect.parse_request(anthropic(_tools(["a"]), "0aa11"))
    two = dialect.parse_request(anthropic(_tools(["a"]), "0bb22"))
    assert one.system[0] is not two.system[0]
    assert one.system[0].text != two.system[0].text
    assert one.system[1] is two.system[1]


def test_the_lineage_fold_hashes_a_shared_tool_list_once():
    dialect = anthropic_messages.AnthropicMessages()
    memo: dict = {}
    for billing in ("1", "2", "3"):
        request = dialect.parse_request(anthropic(_tools(["a", "b", "c"]), billing))
        signals_of(Exchange(dialect="anthropic.messages", seq=0,
                            url="https://api.anthropic.com/v1/messages",
                            request=request), memo=memo)
    tool_entries = [v for v in memo.values() if type(v[0]).__name__ == "Tool"]
    assert len(tool_entries) == 3  # one per tool, not one per tool and request


def test_values_python_calls_equal_but_written_otherwise_are_converted_anew():
    """1 == 1.0 == True, and dicts are equal in any key order; a record keeps what it read."""
    dialect = anthropic_messages.AnthropicMessages()
    schema = {"type": "object", "properties": {"n": {"type": "integer", "default": 1}}}
    seen = []
    for default in (1, 1.0, True):
        tool = {"name": "a", "input_schema": {**schema, "properties": {
            "n": {"type": "integer", "default": default}}}}
        seen.append(dialect.parse_request(anthropic([tool], "1")).tools[0])
    seen.append(dialect.parse_request(anthropic(
        [{"input_schema": schema, "name": "a"}], "1")).tools[0])  # keys in another order
    for tool, default in zip(seen, (1, 1.0, True), strict=False):
        assert type(tool.parameters["properties"]["n"]["default"]) is type(default)
    assert len({id(t) for t in seen}) == 4


def test_a_message_written_otherwise_is_not_a_recent_requests_record():
    dialect = anthropic_messages.AnthropicMessages()

    def body(n) -> bytes:
        return orjson.dumps({"model": "m", "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "a", "input": {"n": n}}]}]})

    first, second, third = (dialect.parse_request(body(n)).messages for n in (1, True, True))
    assert first[0] is second[0] is third[0]
    assert second[1] is not first[1] and second[1].content[0].arguments == {"n": True}
    assert type(second[1].content[0].arguments["n"]) is bool
    assert third[1] is second[1]


def test_values_that_are_not_a_list_convert_as_before():
    reused = Reused(str.upper)
    assert reused("ab") == ["A", "B"]
    assert reused([]) == []
    assert reused(["x", "y"]) == ["X", "Y"]
    with pytest.raises(TypeError):
        Reused(str.upper)([1])
