"""`--format otel`: each session as one OTLP JSON ExportTraceServiceRequest that the
OpenTelemetry protobuf definitions parse, with spans named and attributed as the GenAI
semantic conventions (v1.41) say."""

from __future__ import annotations

import orjson
import pytest
from export_checks import as_protobuf
from recorded_sessions import (
    PROMPT,
    SESSIONS,
    SYSTEM,
    TOOL_OUTPUT,
    export_lines,
    first_calls,
    recorded_store,
)

from forge_record.store import open_store

CLIENT, INTERNAL = 3, 1


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return recorded_store(tmp_path_factory.getbasetemp() / "export-sessions")


def spans_of(line: dict) -> list[dict]:
    return line["resourceSpans"][0]["scopeSpans"][0]["spans"]


def attrs(span: dict) -> dict:
    def value(v):
        if "arrayValue" in v:
            return [value(x) for x in v["arrayValue"]["values"]]
        kind, got = next(iter(v.items()))
        return int(got) if kind == "intValue" else got
    return {a["key"]: value(a["value"]) for a in span["attributes"]}


@pytest.mark.parametrize("dialect", list(SESSIONS))
def test_every_session_parses_as_otlp(url, dialect):
    [line], _ = export_lines(url, "otel", dialect)
    request = as_protobuf(line)
    spans = request.resource_spans[0].scope_spans[0].spans
    assert len({s.trace_id for s in spans}) == 1
    ids = {s.span_id for s in spans}
    assert all(s.parent_span_id in ids for s in spans if s.parent_span_id)
    assert all(s.end_time_unix_nano >= s.start_time_unix_nano for s in spans)


def test_anthropic_session_spans(url):
    [line], _ = export_lines(url, "otel", "anthropic.messages")
    spans = spans_of(line)
    root = spans[0]
    assert (root["name"], root["kind"]) == ("invoke_agent claude-code", INTERNAL)
    assert attrs(root)["gen_ai.conversation.id"] == SESSIONS["anthropic.messages"][0]
    chats = [s for s in spans if attrs(s)["gen_ai.operation.name"] == "chat"]
    assert [(s["name"], s["kind"], s["parentSpanId"]) for s in chats] == \
        [("chat claude-sonnet-4-5", CLIENT, root["spanId"])] * 2
    first = attrs(chats[0])
    assert first["gen_ai.provider.name"] == "anthropic"
    assert first["gen_ai.request.model"] == first["gen_ai.response.model"] == "claude-sonnet-4-5"
    assert first["gen_ai.response.finish_reasons"] == ["tool_call"]
    assert first["gen_ai.request.stream"] is True and first["gen_ai.request.max_tokens"] == 1000
    assert first["gen_ai.usage.input_tokens"] == 100 and first["gen_ai.usage.output_tokens"] == 20
    assert orjson.loads(first["gen_ai.system_instructions"]) == [{"type": "text",
                                                                  "content": SYSTEM}]
    assert orjson.loads(first["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": PROMPT}]}]
    [call] = first_calls(url, "anthropic.messages")
    assert orjson.loads(first["gen_ai.output.messages"]) == [{
        "role": "assistant", "finish_reason": "tool_call", "parts": [
            {"type": "text", "content": "I'll run that command."},
            {"type": "tool_call", "id": call.id, "name": "Bash", "arguments": call.arguments}]}]
    assert orjson.loads(first["gen_ai.tool.definitions"])[0]["name"] == "Bash"
    last_output = orjson.loads(attrs(chats[1])["gen_ai.output.messages"])[0]
    assert last_output["parts"][0] == {"type": "reasoning", "content": "The tool ran; report it."}


def test_tool_runs_are_execute_tool_spans_between_the_calls(url):
    [line], _ = export_lines(url, "otel", "openai.chat")
    spans = spans_of(line)
    chats = [s for s in spans if s["kind"] == CLIENT]
    tools = [s for s in spans if attrs(s)["gen_ai.operation.name"] == "execute_tool"]
    calls = first_calls(url, "openai.chat")
    assert [attrs(t)["gen_ai.tool.call.id"] for t in tools] == [c.id for c in calls]
    for tool in tools:
        a = attrs(tool)
        assert tool["name"] == "execute_tool exec_command" and tool["kind"] == INTERNAL
        assert a["gen_ai.tool.call.result"] == TOOL_OUTPUT and a["gen_ai.tool.type"] == "function"
        assert chats[0]["endTimeUnixNano"] <= tool["startTimeUnixNano"]
        assert tool["endTimeUnixNano"] == chats[1]["startTimeUnixNano"]


def test_gemini_calls_are_generate_content(url):
    [line], _ = export_lines(url, "otel", "gemini.generate")
    names = {s["name"] for s in spans_of(line) if s["kind"] == CLIENT}
    assert names == {"generate_content gemini-2.5-flash"}
    providers = {attrs(s)["gen_ai.provider.name"] for s in spans_of(line) if s["kind"] == CLIENT}
    assert providers == {"gcp.gemini"}


def test_the_same_session_exports_the_same_trace(url):
    once, _ = export_lines(url, "otel", "openai.responses")
    again, _ = export_lines(url, "otel", "openai.responses")
    assert once == again


def test_a_failed_call_has_an_error_status(url, tmp_path):
    """An exchange whose status is error carries error.type and an ERROR span status."""
    import dataclasses

    from forge_record.records import ERROR
    from forge_record.store import default_store_url

    with open_store(url) as store:
        ex = next(store.iter_exchanges(SESSIONS["openai.chat"][0]))
        session = store.get_session(SESSIONS["openai.chat"][0])
    failed = dataclasses.replace(ex, status=ERROR, http_status=529, response=dataclasses.replace(
        ex.response, error={"type": "overloaded_error", "message": "Overloaded"}))
    copy = default_store_url(tmp_path)
    with open_store(copy) as store:
        store.add_session(session)
        store.add_exchange(session.id, failed)
    [line], _ = export_lines(copy, "otel")
    [chat] = [s for s in spans_of(line) if s["kind"] == CLIENT]
    assert chat["status"] == {"code": 2, "message": "Overloaded"}
    assert attrs(chat)["error.type"] == "overloaded_error"
    assert attrs(chat)["gen_ai.response.finish_reasons"] == ["error"]


def test_a_subagent_span_sits_under_the_tool_call_that_spawned_it(tmp_path):
    """Not under the chat span that asked for it: that one ends before the subagent starts."""
    import io

    from lineage_sessions import record, subagent_session

    from forge_record.exporters.base import Options, Tally
    from forge_record.exporters.otel import Exporter
    from forge_record.exporters.units import load_session

    store_url = f"sqlite:///{tmp_path / 'traces.db'}"
    exchanges = subagent_session()
    for n, ex in enumerate(exchanges):  # main asks, the subagent runs, main gets the result
        ex.started_at, ex.ended_at = 1000.0 + 10 * n, 1005.0 + 10 * n
    record(store_url, "a" * 16, exchanges, started=990.0)
    out = io.BytesIO()
    with open_store(store_url) as store:
        Exporter(out, Options(), Tally()).write_session(load_session(store, "a" * 16))
    spans = spans_of(orjson.loads(out.getvalue()))
    by_id = {s["spanId"]: s for s in spans}
    [agent] = [s for s in spans if attrs(s).get("gen_ai.agent.id", "").startswith("subagent-")
               and attrs(s)["gen_ai.operation.name"] == "invoke_agent"]
    parent = by_id[agent["parentSpanId"]]
    assert parent["name"] == "execute_tool Agent"
    assert int(parent["startTimeUnixNano"]) <= int(agent["startTimeUnixNano"])
    assert int(agent["endTimeUnixNano"]) <= int(parent["endTimeUnixNano"])
