"""The Responses bridge through the live proxy, in front of the mock engine (Chat Completions
only, vLLM's fields): the openai SDK over HTTP SSE, and a plain `websockets` client sending
Codex-shaped `response.create` messages over the WebSocket the proxy answers itself. Each does
a function-call round trip with `previous_response_id`, and the record keeps both sides of
each call with the engine's tokens on the agent's."""

from __future__ import annotations

import openai
import orjson
import pytest
from engine_mock import bridging_proxy, prepared, scripted_engine
from websockets.sync.client import connect

from forge_record.bridge.pairs import link_of
from forge_record.mock import engine as mock_engine
from forge_record.records import COMPLETE

SHELL = {"type": "function", "name": "exec_command", "description": "Run a command",
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}
SCRIPT = [{"text": "I'll run it.", "tool_calls": [{"name": "exec_command",
                                                   "arguments": {"cmd": "ls"}}]},
          {"text": "There is a README."}]
PROMPT = [{"type": "message", "role": "user",
           "content": [{"type": "input_text", "text": "What is here?"}]}]
TERMINAL = {"response.completed", "response.failed", "response.incomplete", "error"}


@pytest.fixture
def engine():
    with scripted_engine(SCRIPT) as m:
        yield m


@pytest.fixture
def proxy(engine, tmp_path):
    """(port, exchanges, recorder): a recording proxy bridging api.openai.com to the engine."""
    with bridging_proxy("api.openai.com", engine.url, tmp_path) as running:
        yield running


def check_pairs(records: list, engine) -> list:
    """Each agent record has its engine record, with the engine's tokens; returns the agent's."""
    engine_side = [r for r in records if r.kind == "engine"]
    agent_side = [r for r in records if r.kind == "model"]
    assert len(engine_side) == len(agent_side) == len(engine.requests)
    for agent, sent in zip(agent_side, engine.requests, strict=True):
        [pair] = [e for e in engine_side if link_of(e) == link_of(agent)]
        assert agent.status == pair.status == COMPLETE, (agent.flags, pair.flags)
        assert agent.dialect == "openai.responses" and "bridged" in agent.flags
        assert "bridge_dropped_tool:web_search" in agent.flags
        assert pair.raw_request == sent.body
        asked = orjson.loads(sent.body)
        assert asked["model"] == "mock-engine" and asked["return_token_ids"] is True
        assert agent.response.tokens == pair.response.tokens
        assert agent.response.tokens.prompt_ids == mock_engine.tokenize(
            mock_engine.render(asked["messages"], asked["tools"]))
    return agent_side


def check_chained_context(engine) -> None:
    """The second engine call got the whole context though the agent sent only its new item."""
    first, second = (orjson.loads(r.body)["messages"] for r in engine.requests)
    assert second[:len(first)] == first
    assert second[len(first)]["role"] == "assistant"
    assert second[len(first)]["tool_calls"][0]["function"]["name"] == "exec_command"
    assert second[-1] == {"role": "tool", "tool_call_id": second[len(first)]["tool_calls"][0][
        "id"], "content": "README.md"}


def test_the_sdk_over_http_does_a_chained_tool_round_trip(proxy, engine):
    port, exchanges, _ = proxy
    client = openai.OpenAI(api_key="sk-dummy-key", base_url=f"http://127.0.0.1:{port}/v1",
                           max_retries=0)
    tools = [SHELL, {"type": "web_search"}]
    with client.responses.stream(model="gpt-5.4", instructions="Be brief.", input=PROMPT,
                                 tools=tools) as stream:
        first = stream.get_final_response()
    [call] = [i for i in first.output if i.type == "function_call"]
    assert (call.name, orjson.loads(call.arguments)) == ("exec_command", {"cmd": "ls"})
    with client.responses.stream(model="gpt-5.4", instructions="Be brief.", tools=tools,
                                 previous_response_id=first.id,
                                 input=[{"type": "function_call_output",
                                         "call_id": call.call_id, "output": "README.md"}]
                                 ) as stream:
        second = stream.get_final_response()
    assert second.output_text == "There is a README."
    check_chained_context(engine)
    agents = check_pairs(prepared(exchanges.wait(4)), engine)
    assert agents[0].raw_response.startswith(b"event: response.created\n")
    assert agents[0].response.id == first.id

    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.create(model="gpt-5.4", input="more", previous_response_id="resp_x")
    assert unknown.value.code == "previous_response_not_found"
    assert len(engine.requests) == 2  # the engine was never asked
    client.close()


def receive_call(ws) -> list[dict]:
    """The events of one call, up to its terminal one."""
    events = []
    while not events or events[-1]["type"] not in TERMINAL:
        events.append(orjson.loads(ws.recv(timeout=30)))
    return events


def create(input_items, **fields) -> str:
    return orjson.dumps({"type": "response.create", "model": "gpt-5.4",
                         "instructions": "Be brief.", "tools": [SHELL, {"type": "web_search"}],
                         "tool_choice": "auto", "parallel_tool_calls": True, "store": False,
                         "stream": True, "include": ["reasoning.encrypted_content"],
                         "input": input_items, **fields}).decode()


def test_codex_shaped_calls_over_the_websocket(proxy, engine):
    port, exchanges, recorder = proxy
    with connect(f"ws://127.0.0.1:{port}/v1/responses",
                 additional_headers={"authorization": "Bearer sk-dummy-key",
                                     "openai-beta": "responses_websockets=2026-02-06"},
                 compression="deflate") as ws:
        ws.send(create(PROMPT, generate=False))
        warm = receive_call(ws)
        assert [e["type"] for e in warm] == ["response.created", "response.in_progress",
                                             "response.completed"]
        ws.send(create([], previous_response_id=warm[-1]["response"]["id"]))
        first = receive_call(ws)
        done = first[-1]["response"]
        assert first[-1]["type"] == "response.completed"
        [call] = [i for i in done["output"] if i["type"] == "function_call"]
        ws.send(orjson.dumps({"type": "response.processed", "response_id": done["id"]}).decode())
        ws.send(create([{"type": "function_call_output", "call_id": call["call_id"],
                         "output": "README.md"}], previous_response_id=done["id"]))
        second = receive_call(ws)
        assert second[-1]["response"]["output"][0]["content"][0]["text"] == "There is a README."
        assert [e["sequence_number"] for e in second] == list(range(len(second)))

        ws.send(create([], previous_response_id="resp_unknown"))
        [error] = receive_call(ws)
        assert error["status"] == 400
        assert error["error"]["code"] == "previous_response_not_found"
    assert len(engine.requests) == 2  # the warm-up and the refused call never reached it
    check_chained_context(engine)
    records = prepared(exchanges.wait(6))
    warm_up = records[0]
    assert warm_up.kind == "side" and warm_up.status == COMPLETE
    assert {r.upstream_url for r in records} == {f"{engine.url}/v1/chat/completions"}
    agents = check_pairs(records[1:-1], engine)
    assert [a.url for a in agents] == ["wss://api.openai.com/v1/responses"] * 2
    assert agents[1].request.parameters["previous_response_id"] == done["id"]
    assert {m.role for m in agents[1].request.messages} >= {"user", "assistant", "tool"}
    assert "untranslatable" in records[-1].flags and recorder.untranslatable == 1


def test_an_engine_out_of_reach_gets_codex_s_error_frame(tmp_path):
    with bridging_proxy("api.openai.com", "http://127.0.0.1:9", tmp_path) as (
            port, exchanges, _):
        with connect(f"ws://127.0.0.1:{port}/v1/responses") as ws:
            ws.send(create(PROMPT))
            [error] = receive_call(ws)
    assert error["type"] == "error" and error["status"] == 502
    assert "the engine call failed" in error["error"]["message"]
    engine_side, agent = prepared(exchanges.wait(2))
    assert engine_side.kind == "engine" and engine_side.status != COMPLETE
    assert agent.kind == "model" and agent.response.error["message"] == error["error"][
        "message"]
